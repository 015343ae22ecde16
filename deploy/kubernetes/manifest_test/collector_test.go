package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const collectorConfigMap = "otelcol-valgen-config"

func collectorConfigs(t *testing.T, m *manifests) *corev1.ConfigMap {
	t.Helper()
	for _, cm := range m.configMaps {
		if cm.Name == collectorConfigMap {
			return cm
		}
	}
	t.Fatalf("no ConfigMap %s", collectorConfigMap)
	return nil
}

func repoConfig(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "collector-config", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func withoutResolver(t *testing.T, config string) (rest map[string]any, resolver any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(config), &rest); err != nil {
		t.Fatal(err)
	}
	exporters, _ := rest["exporters"].(map[string]any)
	lb, _ := exporters["load_balancing"].(map[string]any)
	if lb == nil {
		t.Fatal("no load_balancing exporter")
	}
	resolver = lb["resolver"]
	delete(lb, "resolver")
	return rest, resolver
}

// The samplers run the repository's configs unchanged, and the agents the repository's agent
// config with the k8s resolver instead of the static one; this catches the copies drifting.
func TestEmbeddedConfigsFollowTheRepository(t *testing.T) {
	m := load(t)
	cm := collectorConfigs(t, m)
	for _, name := range []string{"collector.yaml", "sampler.yaml"} {
		if cm.Data[name] != repoConfig(t, name) {
			t.Errorf("ConfigMap %s: %s differs from collector-config/%s; copy it over", cm.Name, name, name)
		}
	}
	embedded, resolver := withoutResolver(t, cm.Data["agent.yaml"])
	original, _ := withoutResolver(t, repoConfig(t, "agent.yaml"))
	if !reflect.DeepEqual(embedded, original) {
		t.Errorf("ConfigMap %s: agent.yaml differs from collector-config/agent.yaml in more than the resolver", cm.Name)
	}
	wantResolver := map[string]any{"k8s": map[string]any{
		"service": "${env:VALGEN_SAMPLER_SERVICE}",
		"ports":   []any{float64(4327)},
	}}
	if !reflect.DeepEqual(resolver, wantResolver) {
		t.Errorf("agent.yaml resolver %v, want %v", resolver, wantResolver)
	}
	sts := m.statefulSets[0]
	svc := findService(m, sts.Spec.ServiceName)
	if svc == nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 4327 {
		t.Errorf("the samplers' headless Service %s should have the one port 4327 the resolver uses", sts.Spec.ServiceName)
	}
	agent := m.daemonSets[0].Spec.Template.Spec.Containers[0]
	if got, want := envValue(agent, "VALGEN_SAMPLER_SERVICE"), sts.Spec.ServiceName+".$(POD_NAMESPACE)"; got != want {
		t.Errorf("agent VALGEN_SAMPLER_SERVICE = %q, want %q (the headless Service in the pod's namespace)", got, want)
	}
}

var envReference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// containerEnv resolves a container's env as the kubelet would, for what these manifests use:
// literal values with $(VAR) references to earlier variables, and the pod's namespace.
func containerEnv(c corev1.Container, namespace string) ([]string, error) {
	values := map[string]string{}
	var env []string
	for _, e := range c.Env {
		value := e.Value
		switch {
		case e.ValueFrom == nil:
			value = envReference.ReplaceAllStringFunc(value, func(ref string) string {
				if v, ok := values[ref[2:len(ref)-1]]; ok {
					return v
				}
				return ref
			})
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			value = namespace
		default:
			return nil, fmt.Errorf("env %s: a source this test cannot resolve", e.Name)
		}
		values[e.Name] = value
		env = append(env, e.Name+"="+value)
	}
	return env, nil
}

// configPaths maps each file the container sees from a ConfigMap volume to its extracted copy.
func configPaths(pod *corev1.PodSpec, c corev1.Container, extracted string) map[string]string {
	paths := map[string]string{}
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			for _, item := range v.ConfigMap.Items {
				paths[filepath.Join(vm.MountPath, item.Path)] = filepath.Join(extracted, v.ConfigMap.Name, item.Key)
			}
		}
	}
	return paths
}

// The collector configs of the ConfigMaps are written to files (VALGEN_K8S_CONFIG_DIR, else a
// temporary folder), and the built collector validates each workload's configs with exactly
// the container's --config arguments and environment.
func TestCollectorConfigsValidate(t *testing.T) {
	m := load(t)
	extracted := os.Getenv("VALGEN_K8S_CONFIG_DIR")
	if extracted == "" {
		extracted = t.TempDir()
	}
	for _, cm := range m.configMaps {
		dir := filepath.Join(extracted, cm.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for key, value := range cm.Data {
			if err := os.WriteFile(filepath.Join(dir, key), []byte(value), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	binary := os.Getenv("OTELCOL_VALGEN")
	if binary == "" {
		binary = filepath.Join(repoRoot, "build/otelcol-valgen")
	}
	if _, err := os.Stat(binary); err != nil {
		t.Skipf("collector configs extracted to %s but NOT validated: %s is missing (build it with `make collector`, or set OTELCOL_VALGEN)", extracted, binary)
	}
	validated := 0
	for _, w := range m.workloads() {
		pod := &w.template.Spec
		for _, c := range pod.Containers {
			if !slices.Contains(c.Args, "--config") {
				continue
			}
			paths := configPaths(pod, c, extracted)
			args := []string{"validate"}
			for i, arg := range c.Args {
				if i > 0 && c.Args[i-1] == "--config" {
					local, ok := paths[arg]
					if !ok {
						t.Fatalf("%s %s: --config %s is not on a ConfigMap volume", w.kind, w.name, arg)
					}
					arg = local
				}
				args = append(args, arg)
			}
			env, err := containerEnv(c, m.kustomization.Namespace)
			if err != nil {
				t.Fatalf("%s %s: %v", w.kind, w.name, err)
			}
			cmd := exec.Command(binary, args...)
			cmd.Env = env // only the pod's: a VALGEN_* variable of this shell must not help
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				var exit *exec.ExitError
				if !errors.As(err, &exit) {
					t.Fatal(err)
				}
				t.Errorf("%s %s: %s %s: %v\n%s", w.kind, w.name, binary, strings.Join(args, " "), err, out.String())
				continue
			}
			t.Logf("%s %s: %s validated", w.kind, w.name, strings.Join(args[1:], " "))
			validated++
		}
	}
	if validated != 2 {
		t.Errorf("%d collector containers validated, want 2 (agent, sampler)", validated)
	}
}
