package manifests

import (
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Every HTTP probe targets a port its pod declares.
func TestProbesTargetDeclaredPorts(t *testing.T) {
	m := load(t)
	for _, w := range m.workloads() {
		for _, c := range w.template.Spec.Containers {
			for kind, probe := range map[string]*corev1.Probe{
				"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe,
			} {
				if probe == nil || probe.HTTPGet == nil {
					continue
				}
				if _, ok := containerPort(&w.template.Spec, probe.HTTPGet.Port); !ok {
					t.Errorf("%s %s container %s: %s probe port %s is not a container port", w.kind, w.name, c.Name, kind, probe.HTTPGet.Port.String())
				}
			}
		}
	}
}

// The exporter serves /metrics on its port named metrics (--metrics-address), the port its
// prometheus.io annotations name, and is probed there: ready on /readyz, alive on /healthz.
func TestExporterMetricsPortAnnotationsAndProbes(t *testing.T) {
	m := load(t)
	var found bool
	for _, w := range m.workloads() {
		if w.template.Labels["app.kubernetes.io/component"] != "exporter" {
			continue
		}
		found = true
		c := w.template.Spec.Containers[0]
		i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" })
		if i < 0 {
			t.Fatalf("exporter: no container port named metrics")
		}
		port := strconv.Itoa(int(c.Ports[i].ContainerPort))
		if !slices.Contains(c.Args, "--metrics-address=0.0.0.0:"+port) {
			t.Errorf("exporter: args %q lack --metrics-address=0.0.0.0:%s", c.Args, port)
		}
		annotations := w.template.Annotations
		if annotations["prometheus.io/scrape"] != "true" || annotations["prometheus.io/port"] != port || annotations["prometheus.io/path"] != "/metrics" {
			t.Errorf("exporter: prometheus.io annotations %v, want scrape true, port %s, path /metrics", annotations, port)
		}
		for kind, want := range map[string]struct {
			probe *corev1.Probe
			path  string
		}{"readiness": {c.ReadinessProbe, "/readyz"}, "liveness": {c.LivenessProbe, "/healthz"}} {
			if want.probe == nil || want.probe.HTTPGet == nil || want.probe.HTTPGet.Path != want.path || want.probe.HTTPGet.Port.String() != "metrics" {
				t.Errorf("exporter: %s probe %+v, want GET %s on the port metrics", kind, want.probe, want.path)
			}
		}
	}
	if !found {
		t.Fatal("no exporter workload")
	}
}
