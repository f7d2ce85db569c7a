package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/trainguard/trainguard/test/chart"
)

// KubeVersions are the Kubernetes releases hack/build-k8s.sh builds, each
// into bin/k8s/<version>/, newest first; keep both lists in step (README
// "Versions tested" says which suite runs on which).
var KubeVersions = []string{"v1.37.2", "v1.36.3"}

// DefaultKubeVersion is the release every suite's kube-apiserver runs
// unless KUBE_VERSION names another of KubeVersions (the version-dependent
// suites run once per release: `make test-matrix`).
var DefaultKubeVersion = KubeVersions[0]

// KubeVersion is the release this run's kube-apiserver is: KUBE_VERSION,
// else DefaultKubeVersion. A release the build script does not build is an
// error, not a silent fall back to the default.
func KubeVersion() (string, error) {
	v := os.Getenv("KUBE_VERSION")
	if v == "" {
		return DefaultKubeVersion, nil
	}
	if !slices.Contains(KubeVersions, v) {
		return "", fmt.Errorf("KUBE_VERSION=%q: the suites know %v (hack/build-k8s.sh builds them)", v, KubeVersions)
	}
	return v, nil
}

// Assets is the directory envtest starts kube-apiserver and etcd from:
// bin/k8s/<KubeVersion()>.
func Assets() (string, error) {
	v, err := KubeVersion()
	if err != nil {
		return "", err
	}
	root, err := chart.RepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bin", "k8s", v)
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s %s not found in %s: run `make k8s-bins` (make test does it for you): %w", b, v, dir, err)
		}
	}
	return dir, nil
}
