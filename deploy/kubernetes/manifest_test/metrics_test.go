package manifests

import (
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Every workload serving metrics (a container port named metrics) carries the prometheus.io
// annotations naming that port, so that a Prometheus discovering pods by them scrapes the
// collectors (the sampler's metrics among theirs) and the exporter: the dashboard's "Pipeline
// health" row reads them. A collector listens for it on all interfaces at that port.
func TestEveryMetricsPortIsAnnotatedForPrometheus(t *testing.T) {
	m := load(t)
	annotated := map[string]bool{}
	for _, w := range m.workloads() {
		for _, c := range w.template.Spec.Containers {
			i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" })
			if i < 0 {
				continue
			}
			port := strconv.Itoa(int(c.Ports[i].ContainerPort))
			a := w.template.Annotations
			if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != port || a["prometheus.io/path"] != "/metrics" {
				t.Errorf("%s %s: prometheus.io annotations %v, want scrape true, port %s, path /metrics", w.kind, w.name, a, port)
			}
			annotated[w.template.Labels["app.kubernetes.io/component"]] = true
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			if _, collector := env["VALGEN_METRICS_HOST"]; !collector {
				continue
			}
			if env["VALGEN_METRICS_HOST"] != "0.0.0.0" {
				t.Errorf("%s %s: VALGEN_METRICS_HOST %q, want 0.0.0.0", w.kind, w.name, env["VALGEN_METRICS_HOST"])
			}
			if p, set := env["VALGEN_METRICS_PORT"]; set && p != port {
				t.Errorf("%s %s: VALGEN_METRICS_PORT %s, but the metrics port is %s", w.kind, w.name, p, port)
			}
		}
	}
	for _, component := range []string{"agent", "sampler", "exporter"} {
		if !annotated[component] {
			t.Errorf("the %s serves no annotated metrics port", component)
		}
	}
}
