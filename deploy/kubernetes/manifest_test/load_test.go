// Package manifests checks the Kubernetes manifests in deploy/kubernetes: every document is
// decoded strictly into its Kubernetes API type, the objects are checked against each other,
// and the collector configurations they embed are validated by the built collector.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	manifestDir       = ".."
	repoRoot          = "../../.."
	kustomizationFile = "kustomization.yaml"
	secretExampleFile = "secret.example.yaml"
)

// kustomization is the part of kustomize's Kustomization that these manifests use. It is
// decoded strictly too, so a field added to kustomization.yaml (a secretGenerator, say) fails
// until this test knows what to check about it.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images"`
}

// manifests holds every object of the kustomization's resources, by type.
type manifests struct {
	kustomization   kustomization
	configMaps      []*corev1.ConfigMap
	services        []*corev1.Service
	serviceAccounts []*corev1.ServiceAccount
	pvcs            []*corev1.PersistentVolumeClaim
	secrets         []*corev1.Secret
	namespaces      []*corev1.Namespace
	daemonSets      []*appsv1.DaemonSet
	statefulSets    []*appsv1.StatefulSet
	deployments     []*appsv1.Deployment
	roles           []*rbacv1.Role
	roleBindings    []*rbacv1.RoleBinding
	networkPolicies []*networkingv1.NetworkPolicy
}

var scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// decodeStrict converts one YAML document to JSON (duplicate keys are errors) and decodes it
// case-sensitively into v, failing on unknown and duplicate fields.
func decodeStrict(doc []byte, v any) error {
	data, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strictErrs, err := json.UnmarshalStrict(data, v)
	if err != nil {
		return err
	}
	return errors.Join(strictErrs...)
}

// splitDocuments returns the non-empty YAML documents of a file.
func splitDocuments(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		data, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
			continue // only comments
		}
		docs = append(docs, doc)
	}
}

// decodeFile decodes every document of a manifest file into the API type its apiVersion and
// kind name; a kind outside the scheme is an error.
func decodeFile(path string) ([]runtime.Object, error) {
	docs, err := splitDocuments(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	objects := make([]runtime.Object, 0, len(docs))
	for i, doc := range docs {
		var typeMeta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &typeMeta); err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", path, i+1, err)
		}
		gvk := schema.FromAPIVersionAndKind(typeMeta.APIVersion, typeMeta.Kind)
		obj, err := scheme.New(gvk)
		if err != nil {
			return nil, fmt.Errorf("%s, document %d: %w", path, i+1, err)
		}
		if err := decodeStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s, document %d (%s): %w", path, i+1, typeMeta.Kind, err)
		}
		objects = append(objects, obj)
	}
	return objects, nil
}

func (m *manifests) add(obj runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		m.configMaps = append(m.configMaps, o)
	case *corev1.Service:
		m.services = append(m.services, o)
	case *corev1.ServiceAccount:
		m.serviceAccounts = append(m.serviceAccounts, o)
	case *corev1.PersistentVolumeClaim:
		m.pvcs = append(m.pvcs, o)
	case *corev1.Secret:
		m.secrets = append(m.secrets, o)
	case *corev1.Namespace:
		m.namespaces = append(m.namespaces, o)
	case *appsv1.DaemonSet:
		m.daemonSets = append(m.daemonSets, o)
	case *appsv1.StatefulSet:
		m.statefulSets = append(m.statefulSets, o)
	case *appsv1.Deployment:
		m.deployments = append(m.deployments, o)
	case *rbacv1.Role:
		m.roles = append(m.roles, o)
	case *rbacv1.RoleBinding:
		m.roleBindings = append(m.roleBindings, o)
	case *networkingv1.NetworkPolicy:
		m.networkPolicies = append(m.networkPolicies, o)
	default:
		return fmt.Errorf("%T: decoded, but no check here knows this kind", obj)
	}
	return nil
}

// load decodes the kustomization and every resource it lists, failing the test on the first
// document that does not decode strictly.
func load(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{}
	raw, err := os.ReadFile(filepath.Join(manifestDir, kustomizationFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(raw, &m.kustomization); err != nil {
		t.Fatalf("%s: %v", kustomizationFile, err)
	}
	for _, resource := range m.kustomization.Resources {
		objects, err := decodeFile(filepath.Join(manifestDir, resource))
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objects {
			if err := m.add(obj); err != nil {
				t.Fatalf("%s: %v", resource, err)
			}
		}
	}
	return m
}

// workload is a pod template with the object that owns it.
type workload struct {
	kind, name string
	selector   *metav1.LabelSelector
	template   *corev1.PodTemplateSpec
	claims     []corev1.PersistentVolumeClaim
}

func (m *manifests) workloads() []workload {
	var ws []workload
	for _, d := range m.daemonSets {
		ws = append(ws, workload{"DaemonSet", d.Name, d.Spec.Selector, &d.Spec.Template, nil})
	}
	for _, s := range m.statefulSets {
		ws = append(ws, workload{"StatefulSet", s.Name, s.Spec.Selector, &s.Spec.Template, s.Spec.VolumeClaimTemplates})
	}
	for _, d := range m.deployments {
		ws = append(ws, workload{"Deployment", d.Name, d.Spec.Selector, &d.Spec.Template, nil})
	}
	return ws
}
