package chart

import (
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// RenderWith runs `helm template` with extra raw arguments (e.g.
// --api-versions trainer.kubeflow.org/v1alpha1, which is how helm is told
// which APIs the target cluster serves) and returns every rendered object.
func RenderWith(helmBin, chartDir, releaseName, namespace string, extra ...string) ([]*unstructured.Unstructured, error) {
	args := append([]string{"template", releaseName, chartDir, "--namespace", namespace}, extra...)
	if !slices.Contains(extra, "--kube-version") {
		args = append(args, "--kube-version", KubeVersion)
	}
	out, err := runHelm(helmBin, args...)
	if err != nil {
		return nil, err
	}
	return Decode(out)
}
