package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The label training pods carry to be admitted to the agents (docs/deployment.md).
const trainingRoleLabel, trainingRoleValue = "otel-valgen/role", "training"

// Pod labels of workloads outside these manifests that a NetworkPolicy may select.
var externalPodLabels = []map[string]string{{"app.kubernetes.io/name": "loki"}}

func selects(t *testing.T, selector *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		t.Fatalf("selector %v: %v", selector, err)
	}
	return s.Matches(labels.Set(podLabels))
}

func TestStrictDecodingRejectsMistakes(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field":   "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {clusterIp: None}\n",
		"duplicate field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {}\nspec: {}\n",
		"wrong case":      "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nSpec: {}\n",
		"unknown kind":    "apiVersion: v1\nkind: Servic\nmetadata: {name: x}\n",
	} {
		path := filepath.Join(t.TempDir(), "doc.yaml")
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := decodeFile(path); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

func TestEveryManifestDecodesStrictly(t *testing.T) {
	m := load(t)
	listed := map[string]bool{kustomizationFile: true, secretExampleFile: true}
	for _, r := range m.kustomization.Resources {
		listed[r] = true
	}
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s is neither a resource of %s nor %s", filepath.Base(f), kustomizationFile, secretExampleFile)
		}
	}
	objects, err := decodeFile(filepath.Join(manifestDir, secretExampleFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(objects) != 1 {
		t.Fatalf("%s: %d documents, want one Secret", secretExampleFile, len(objects))
	}
	if _, ok := objects[0].(*corev1.Secret); !ok {
		t.Fatalf("%s holds a %T, want a Secret", secretExampleFile, objects[0])
	}
}

func TestNamespaceAndImages(t *testing.T) {
	m := load(t)
	k := m.kustomization
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization: apiVersion %q kind %q", k.APIVersion, k.Kind)
	}
	if len(m.namespaces) != 1 || m.namespaces[0].Name != k.Namespace {
		t.Errorf("want one Namespace named %q (the kustomization's namespace)", k.Namespace)
	}
	for _, l := range k.Labels {
		if l.IncludeSelectors {
			t.Error("kustomization labels with includeSelectors would change the workloads' immutable selectors")
		}
	}
	compose, err := os.ReadFile(filepath.Join(repoRoot, "docker/docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{}
	for _, image := range k.Images {
		tags[image.Name] = image.NewTag
		// The names and tags docker/ builds, so `docker build` as documented gives these images.
		ref := image.Name + ":" + image.NewTag
		if !strings.Contains(string(compose), "image: "+ref+"\n") {
			t.Errorf("kustomization image %s is not an image docker/docker-compose.yml builds", ref)
		}
	}
	for _, w := range m.workloads() {
		for _, c := range w.template.Spec.Containers {
			name, tag, _ := strings.Cut(c.Image, ":")
			want, ok := tags[name]
			if !ok {
				t.Errorf("%s %s: image %s is not in the kustomization's images", w.kind, w.name, c.Image)
			} else if tag != want {
				t.Errorf("%s %s: image %s, the kustomization sets tag %s", w.kind, w.name, c.Image, want)
			}
		}
	}
}

func TestSelectorsMatchPodTemplates(t *testing.T) {
	m := load(t)
	ws := m.workloads()
	if len(ws) != 3 {
		t.Fatalf("%d workloads, want the agent DaemonSet, the sampler StatefulSet and the exporter Deployment", len(ws))
	}
	for i, w := range ws {
		if w.selector == nil || len(w.selector.MatchLabels)+len(w.selector.MatchExpressions) == 0 {
			t.Errorf("%s %s: empty selector", w.kind, w.name)
			continue
		}
		if !selects(t, w.selector, w.template.Labels) {
			t.Errorf("%s %s: selector %v does not match its pod template's labels %v", w.kind, w.name, w.selector, w.template.Labels)
		}
		for j, other := range ws {
			if i != j && selects(t, w.selector, other.template.Labels) {
				t.Errorf("%s %s: selector also matches the pods of %s %s", w.kind, w.name, other.kind, other.name)
			}
		}
	}
}

// containerPort finds the port a Service or NetworkPolicy names (by name or number) in a pod.
func containerPort(pod *corev1.PodSpec, port intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, c := range pod.Containers {
		for _, p := range c.Ports {
			if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
				return p, true
			}
		}
	}
	return corev1.ContainerPort{}, false
}

func TestServicesReachTheirPods(t *testing.T) {
	m := load(t)
	for _, svc := range m.services {
		var matched []workload
		for _, w := range m.workloads() {
			if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
				matched = append(matched, w)
			}
		}
		if len(matched) != 1 {
			t.Errorf("Service %s: selector %v matches %d workloads, want 1", svc.Name, svc.Spec.Selector, len(matched))
			continue
		}
		for _, p := range svc.Spec.Ports {
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(p.Port)
			}
			cp, ok := containerPort(&matched[0].template.Spec, target)
			if !ok {
				t.Errorf("Service %s port %s: target %s is no container port of %s %s", svc.Name, p.Name, target.String(), matched[0].kind, matched[0].name)
			} else if cp.Protocol != p.Protocol {
				t.Errorf("Service %s port %s: protocol %s, container port %s", svc.Name, p.Name, p.Protocol, cp.Protocol)
			}
		}
	}
	agentService := findService(m, "agent")
	if agentService == nil || agentService.Spec.InternalTrafficPolicy == nil ||
		*agentService.Spec.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyLocal {
		t.Error("Service agent: want internalTrafficPolicy Local, so training pods reach their own node's agent")
	}
}

func findService(m *manifests, name string) *corev1.Service {
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func TestStatefulSetHasHeadlessServiceAndVolumes(t *testing.T) {
	m := load(t)
	if len(m.statefulSets) != 1 {
		t.Fatalf("%d StatefulSets, want the samplers' one", len(m.statefulSets))
	}
	sts := m.statefulSets[0]
	svc := findService(m, sts.Spec.ServiceName)
	switch {
	case svc == nil:
		t.Errorf("StatefulSet %s: serviceName %q is no Service here", sts.Name, sts.Spec.ServiceName)
	case svc.Spec.ClusterIP != corev1.ClusterIPNone:
		t.Errorf("Service %s: clusterIP %q, want None (headless)", svc.Name, svc.Spec.ClusterIP)
	case !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)):
		t.Errorf("Service %s does not select the pods of StatefulSet %s", svc.Name, sts.Name)
	}
	if len(sts.Spec.VolumeClaimTemplates) == 0 {
		t.Fatalf("StatefulSet %s: no volumeClaimTemplates (one volume per sampler for its stored state)", sts.Name)
	}
	for _, claim := range sts.Spec.VolumeClaimTemplates {
		if claim.Spec.Resources.Requests.Storage().IsZero() {
			t.Errorf("StatefulSet %s: claim %s requests no storage", sts.Name, claim.Name)
		}
	}
	state := envValue(sts.Spec.Template.Spec.Containers[0], "VALGEN_STATE_DIR")
	if !mountedFromClaim(sts, state) {
		t.Errorf("StatefulSet %s: VALGEN_STATE_DIR %q is not on a volume claim", sts.Name, state)
	}
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func mountedFromClaim(sts *appsv1.StatefulSet, path string) bool {
	for _, c := range sts.Spec.Template.Spec.Containers {
		for _, vm := range c.VolumeMounts {
			for _, claim := range sts.Spec.VolumeClaimTemplates {
				if vm.Name == claim.Name && path != "" && (path == vm.MountPath || strings.HasPrefix(path, vm.MountPath+"/")) {
					return true
				}
			}
		}
	}
	return false
}

func TestVolumesAndAccountsExist(t *testing.T) {
	m := load(t)
	configMaps := map[string]*corev1.ConfigMap{}
	for _, cm := range m.configMaps {
		configMaps[cm.Name] = cm
	}
	claims := map[string]bool{}
	for _, pvc := range m.pvcs {
		claims[pvc.Name] = true
	}
	accounts := map[string]bool{}
	for _, sa := range m.serviceAccounts {
		accounts[sa.Name] = true
	}
	for _, w := range m.workloads() {
		pod := &w.template.Spec
		where := w.kind + " " + w.name
		if pod.ServiceAccountName != "" && !accounts[pod.ServiceAccountName] {
			t.Errorf("%s: serviceAccountName %s is no ServiceAccount here", where, pod.ServiceAccountName)
		}
		volumes := map[string]bool{}
		for _, v := range pod.Volumes {
			volumes[v.Name] = false
			switch {
			case v.ConfigMap != nil:
				cm, ok := configMaps[v.ConfigMap.Name]
				if !ok {
					t.Errorf("%s: volume %s: ConfigMap %s is not here", where, v.Name, v.ConfigMap.Name)
					continue
				}
				for _, item := range v.ConfigMap.Items {
					if _, ok := cm.Data[item.Key]; !ok {
						t.Errorf("%s: volume %s: ConfigMap %s has no key %s", where, v.Name, cm.Name, item.Key)
					}
				}
			case v.PersistentVolumeClaim != nil:
				if !claims[v.PersistentVolumeClaim.ClaimName] {
					t.Errorf("%s: volume %s: PersistentVolumeClaim %s is not here", where, v.Name, v.PersistentVolumeClaim.ClaimName)
				}
			case v.EmptyDir != nil:
			default:
				t.Errorf("%s: volume %s: a kind of volume this test does not check", where, v.Name)
			}
		}
		for _, claim := range w.claims {
			volumes[claim.Name] = false
		}
		for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
			for _, vm := range c.VolumeMounts {
				if _, ok := volumes[vm.Name]; !ok {
					t.Errorf("%s: container %s mounts %s, which is no volume of the pod", where, c.Name, vm.Name)
				}
				volumes[vm.Name] = true
			}
		}
		for name, used := range volumes {
			if !used {
				t.Errorf("%s: volume %s is mounted by no container", where, name)
			}
		}
	}
}

func TestAgentsMayWatchSamplerEndpointSlices(t *testing.T) {
	m := load(t)
	if len(m.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want the agents' one", len(m.daemonSets))
	}
	agentPod := m.daemonSets[0].Spec.Template.Spec
	if agentPod.AutomountServiceAccountToken != nil && !*agentPod.AutomountServiceAccountToken {
		t.Error("agent pods need their ServiceAccount token for the k8s resolver")
	}
	granted := false
	for _, rb := range m.roleBindings {
		var role *rbacv1.Role
		for _, r := range m.roles {
			if rb.RoleRef.Kind == "Role" && r.Name == rb.RoleRef.Name {
				role = r
			}
		}
		if role == nil {
			t.Errorf("RoleBinding %s: roleRef %s %s is not here", rb.Name, rb.RoleRef.Kind, rb.RoleRef.Name)
			continue
		}
		for _, s := range rb.Subjects {
			if s.Kind != "ServiceAccount" || s.Namespace != m.kustomization.Namespace {
				t.Errorf("RoleBinding %s: subject %s %s/%s, want a ServiceAccount in %s", rb.Name, s.Kind, s.Namespace, s.Name, m.kustomization.Namespace)
			}
			if s.Name != agentPod.ServiceAccountName {
				continue
			}
			for _, rule := range role.Rules {
				if slices.Contains(rule.APIGroups, "discovery.k8s.io") && slices.Contains(rule.Resources, "endpointslices") &&
					slices.Contains(rule.Verbs, "get") && slices.Contains(rule.Verbs, "list") && slices.Contains(rule.Verbs, "watch") {
					granted = true
				}
			}
		}
	}
	if !granted {
		t.Error("the agents' ServiceAccount is not granted get, list and watch on discovery.k8s.io endpointslices")
	}
	for _, w := range m.workloads() {
		if w.kind != "DaemonSet" {
			if a := w.template.Spec.AutomountServiceAccountToken; a == nil || *a {
				t.Errorf("%s %s: automountServiceAccountToken should be false; it uses no API", w.kind, w.name)
			}
		}
	}
}

// describePeer names who a NetworkPolicy peer admits, for comparing with the intended set.
func describePeer(p networkingv1.NetworkPolicyPeer) string {
	if p.IPBlock != nil {
		return "ipBlock " + p.IPBlock.CIDR
	}
	namespaces := "this namespace"
	if p.NamespaceSelector != nil {
		namespaces = "namespaces " + selectorString(p.NamespaceSelector)
	}
	pods := "all pods"
	if p.PodSelector != nil {
		pods = "pods " + selectorString(p.PodSelector)
	}
	return pods + " in " + namespaces
}

func selectorString(s *metav1.LabelSelector) string {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return err.Error()
	}
	if sel.Empty() {
		return "<all>"
	}
	return sel.String()
}

// admitted lists who the NetworkPolicies let reach a TCP port of a pod: every ingress rule of
// every policy that selects the pod and covers the port. "anyone" is a rule without peers.
func admitted(t *testing.T, m *manifests, podLabels map[string]string, port corev1.ContainerPort) []string {
	t.Helper()
	set := map[string]bool{}
	for _, np := range m.networkPolicies {
		if !selects(t, &np.Spec.PodSelector, podLabels) {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			covers := len(rule.Ports) == 0
			for _, rp := range rule.Ports {
				protocol := corev1.ProtocolTCP
				if rp.Protocol != nil {
					protocol = *rp.Protocol
				}
				if protocol != port.Protocol {
					continue
				}
				if rp.Port == nil ||
					(rp.Port.Type == intstr.Int && rp.Port.IntVal == port.ContainerPort) ||
					(rp.Port.Type == intstr.String && rp.Port.StrVal == port.Name) {
					covers = true
				}
			}
			if !covers {
				continue
			}
			if len(rule.From) == 0 {
				set["anyone"] = true
			}
			for _, peer := range rule.From {
				set[describePeer(peer)] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func TestNetworkPoliciesAdmitOnlyThePipeline(t *testing.T) {
	m := load(t)
	var agent, sampler, exporter workload
	for _, w := range m.workloads() {
		switch w.template.Labels["app.kubernetes.io/component"] {
		case "agent":
			agent = w
		case "sampler":
			sampler = w
		case "exporter":
			exporter = w
		}
	}
	if agent.template == nil || sampler.template == nil || exporter.template == nil {
		t.Fatal("want workloads labelled app.kubernetes.io/component agent, sampler and exporter")
	}
	from := func(w workload) string {
		return describePeer(networkingv1.NetworkPolicyPeer{PodSelector: w.selector})
	}
	training := describePeer(networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{trainingRoleLabel: trainingRoleValue}},
	})
	// Every port of every workload, and who may reach it; a port not listed admits no one.
	want := map[string][]string{
		"agent/otlp-grpc":    {training},
		"agent/otlp-http":    {training},
		"sampler/otlp-grpc":  {from(agent)},
		"exporter/otlp-grpc": {from(sampler)},
	}
	for _, w := range []workload{agent, sampler, exporter} {
		if !slices.ContainsFunc(m.networkPolicies, func(np *networkingv1.NetworkPolicy) bool {
			return selects(t, &np.Spec.PodSelector, w.template.Labels) &&
				slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
		}) {
			t.Errorf("%s %s: no NetworkPolicy isolates its ingress", w.kind, w.name)
		}
		component := w.template.Labels["app.kubernetes.io/component"]
		for _, c := range w.template.Spec.Containers {
			for _, p := range c.Ports {
				key := component + "/" + p.Name
				got := admitted(t, m, w.template.Labels, p)
				if fmt.Sprint(got) != fmt.Sprint(want[key]) {
					t.Errorf("%s port %d: admits %q, want %q", key, p.ContainerPort, got, want[key])
				}
			}
		}
	}
	// Every policy selects pods of these manifests or a declared outside workload (Loki), and
	// every peer in this namespace is one of the workloads here.
	for _, np := range m.networkPolicies {
		selectsSomething := len(np.Spec.PodSelector.MatchLabels)+len(np.Spec.PodSelector.MatchExpressions) == 0
		for _, w := range m.workloads() {
			selectsSomething = selectsSomething || selects(t, &np.Spec.PodSelector, w.template.Labels)
		}
		for _, ext := range externalPodLabels {
			selectsSomething = selectsSomething || selects(t, &np.Spec.PodSelector, ext)
		}
		if !selectsSomething {
			t.Errorf("NetworkPolicy %s: podSelector %s selects no pod these manifests know", np.Name, selectorString(&np.Spec.PodSelector))
		}
		for _, rule := range np.Spec.Ingress {
			for _, peer := range rule.From {
				if peer.NamespaceSelector != nil || peer.PodSelector == nil {
					continue
				}
				if !slices.ContainsFunc(m.workloads(), func(w workload) bool { return selects(t, peer.PodSelector, w.template.Labels) }) {
					t.Errorf("NetworkPolicy %s: peer %s is no workload here", np.Name, describePeer(peer))
				}
			}
		}
	}
	loki := admitted(t, m, externalPodLabels[0], corev1.ContainerPort{ContainerPort: 3100, Protocol: corev1.ProtocolTCP})
	if fmt.Sprint(loki) != fmt.Sprint([]string{from(sampler)}) {
		t.Errorf("Loki port 3100 admits %q, want the samplers only", loki)
	}
}

var secretLikeName = regexp.MustCompile(`(?i)(key|token|password|secret|credential)`)

// A collector setting that would hold a credential, with a literal value rather than ${env:...}.
var literalCredential = regexp.MustCompile(`(?im)^\s*(api_key|apikey|password|token|secret|bearer_token)\s*:\s*([^\s$#].*)$`)

func TestNoSecretLiterals(t *testing.T) {
	m := load(t)
	if len(m.secrets) != 0 {
		t.Errorf("the kustomization's resources hold %d Secrets; credentials are created out of band", len(m.secrets))
	}
	objects, err := decodeFile(filepath.Join(manifestDir, secretExampleFile))
	if err != nil {
		t.Fatal(err)
	}
	example := objects[0].(*corev1.Secret)
	if len(example.Data) != 0 {
		t.Errorf("%s: data must stay empty; placeholders go in stringData", secretExampleFile)
	}
	for k, v := range example.StringData {
		if v != "replace-me" {
			t.Errorf("%s: %s is %q, want the placeholder replace-me", secretExampleFile, k, v)
		}
	}
	referenced := false
	for _, w := range m.workloads() {
		for _, c := range w.template.Spec.Containers {
			for _, e := range c.Env {
				if e.Value != "" && secretLikeName.MatchString(e.Name) {
					t.Errorf("%s %s: %s has a literal value; take it from a Secret", w.kind, w.name, e.Name)
				}
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					referenced = true
					if e.ValueFrom.SecretKeyRef.Name != example.Name {
						t.Errorf("%s %s: Secret %s is not the one %s describes", w.kind, w.name, e.ValueFrom.SecretKeyRef.Name, secretExampleFile)
					}
				}
			}
			for _, from := range c.EnvFrom {
				if from.SecretRef != nil {
					referenced = true
					if from.SecretRef.Name != example.Name {
						t.Errorf("%s %s: Secret %s is not the one %s describes", w.kind, w.name, from.SecretRef.Name, secretExampleFile)
					}
				}
			}
		}
	}
	if !referenced {
		t.Error("no workload takes the tracker credentials from the Secret")
	}
	for _, cm := range m.configMaps {
		for key, value := range cm.Data {
			if match := literalCredential.FindString(value); match != "" {
				t.Errorf("ConfigMap %s, %s: a literal credential: %q", cm.Name, key, strings.TrimSpace(match))
			}
		}
	}
}
