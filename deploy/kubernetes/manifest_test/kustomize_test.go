package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomize renders the kustomization as `kubectl apply -k` does (kustomize's default options:
// files from inside the kustomization's folder only, no plugins), and the result decodes
// strictly too: every resource with the namespace, the part-of label and the images applied.
func TestKustomizeRenders(t *testing.T) {
	m := load(t)
	dir, err := filepath.Abs(manifestDir)
	if err != nil {
		t.Fatal(err)
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	rendered, err := resources.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	// VALGEN_K8S_RENDERED keeps the rendered manifests for a look (make k8s-check sets it).
	path := os.Getenv("VALGEN_K8S_RENDERED")
	if path == "" {
		path = filepath.Join(t.TempDir(), "rendered.yaml")
	}
	if err := os.WriteFile(path, rendered, 0o644); err != nil {
		t.Fatal(err)
	}
	objects, err := decodeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sources := 0
	for _, r := range m.kustomization.Resources {
		docs, err := splitDocuments(filepath.Join(manifestDir, r))
		if err != nil {
			t.Fatal(err)
		}
		sources += len(docs)
	}
	if len(objects) != sources {
		t.Errorf("kustomize rendered %d objects from %d documents", len(objects), sources)
	}
	images := map[string]string{}
	for _, image := range m.kustomization.Images {
		name := image.Name
		if image.NewName != "" {
			name = image.NewName
		}
		images[name+":"+image.NewTag] = image.Name
	}
	for _, obj := range objects {
		meta, err := metaOf(obj)
		if err != nil {
			t.Fatal(err)
		}
		kind := obj.GetObjectKind().GroupVersionKind().Kind
		if _, isNamespace := obj.(*corev1.Namespace); !isNamespace && meta.Namespace != m.kustomization.Namespace {
			t.Errorf("%s %s: namespace %q after kustomize, want %q", kind, meta.Name, meta.Namespace, m.kustomization.Namespace)
		}
		for _, l := range m.kustomization.Labels {
			for k, v := range l.Pairs {
				if meta.Labels[k] != v {
					t.Errorf("%s %s: label %s=%q after kustomize, want %q", kind, meta.Name, k, meta.Labels[k], v)
				}
			}
		}
		var pod *corev1.PodSpec
		switch o := obj.(type) {
		case *appsv1.DaemonSet:
			pod = &o.Spec.Template.Spec
		case *appsv1.StatefulSet:
			pod = &o.Spec.Template.Spec
		case *appsv1.Deployment:
			pod = &o.Spec.Template.Spec
		case *rbacv1.RoleBinding:
			for _, s := range o.Subjects {
				if s.Namespace != m.kustomization.Namespace {
					t.Errorf("RoleBinding %s: subject %s in %q after kustomize", o.Name, s.Name, s.Namespace)
				}
			}
		}
		if pod == nil {
			continue
		}
		for _, c := range pod.Containers {
			if _, ok := images[c.Image]; !ok {
				t.Errorf("%s %s: image %s after kustomize is not one the kustomization sets", kind, meta.Name, c.Image)
			}
		}
	}
	if strings.Contains(string(rendered), "kind: Secret\n") {
		t.Error("kustomize rendered a Secret")
	}
}

func metaOf(obj runtime.Object) (*metav1.ObjectMeta, error) {
	accessor, ok := obj.(metav1.ObjectMetaAccessor)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return accessor.GetObjectMeta().(*metav1.ObjectMeta), nil
}
