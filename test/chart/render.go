// Package chart renders charts/trainguard with the real helm binary and
// hands the manifests to tests. It is a non-test package so that the
// integration suite takes its webhook configurations from the rendered chart
// instead of keeping a second, hand-written copy that could drift.
package chart

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/testing/repo"
)

// CertManagerModule is the module whose deploy/crds the integration suite
// installs before applying the rendered Issuer and Certificate.
const CertManagerModule = "github.com/cert-manager/cert-manager"

// RepoRoot walks up from the working directory to trainguard's go.mod.
func RepoRoot() (string, error) { return repo.Root() }

// Dir is charts/trainguard in the repository.
func Dir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "charts", "trainguard"), nil
}

// HelmBin is bin/helm in the repository. A missing binary is an error that
// says how to install it: tests must fail, not skip, without it.
func HelmBin() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("helm not found at %s (install it with `make %s` or `make tools`): %w", bin, bin, err)
	}
	return bin, nil
}

// KubeVersion is the Kubernetes version `helm template` renders for unless
// a caller passes its own --kube-version: the kube-apiserver the suites run
// (hack/build-k8s.sh), so a rendering matches what `helm install` against
// that server renders. Without it Helm uses the version it was built with,
// which for a `go install`ed helm is v1.20, older than the chart's
// kubeVersion allows.
const KubeVersion = "1.37.2"

// Render runs `helm template` for the chart and returns every rendered
// object. setValues are passed as `--set` flags, one per element.
func Render(helmBin, chartDir, releaseName, namespace string, setValues ...string) ([]*unstructured.Unstructured, error) {
	args := []string{"template", releaseName, chartDir, "--namespace", namespace, "--kube-version", KubeVersion}
	for _, v := range setValues {
		args = append(args, "--set", v)
	}
	out, err := runHelm(helmBin, args...)
	if err != nil {
		return nil, err
	}
	return Decode(out)
}

// RenderShipped renders the repository's chart with the repository's helm
// (HelmBin, Dir, Render): what every suite that checks the shipped objects
// calls, so none finds the binary and the chart on its own.
func RenderShipped(releaseName, namespace string, setValues ...string) ([]*unstructured.Unstructured, error) {
	helm, err := HelmBin()
	if err != nil {
		return nil, err
	}
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	return Render(helm, dir, releaseName, namespace, setValues...)
}

// Lint runs `helm lint --strict` with the given --set values.
func Lint(helmBin, chartDir, namespace string, setValues ...string) error {
	args := []string{"lint", "--strict", chartDir, "--namespace", namespace}
	for _, v := range setValues {
		args = append(args, "--set", v)
	}
	_, err := runHelm(helmBin, args...)
	return err
}

func runHelm(helmBin string, args ...string) ([]byte, error) {
	cmd := exec.Command(helmBin, args...)
	// Keep the user's helm config and caches out of the result.
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+os.TempDir()+"/trainguard-helm-config", "HELM_CACHE_HOME="+os.TempDir()+"/trainguard-helm-cache")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.Bytes(), nil
}

// Decode splits a multi-document YAML stream into objects, skipping empty documents.
func Decode(manifests []byte) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading rendered manifests: %w", err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("decoding rendered document: %w\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// Find returns the one object of kind and name, or an error.
func Find(objs []*unstructured.Unstructured, kind, name string) (*unstructured.Unstructured, error) {
	var found *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if found != nil {
				return nil, fmt.Errorf("two rendered %s objects named %q", kind, name)
			}
			found = o
		}
	}
	if found == nil {
		return nil, fmt.Errorf("no rendered %s named %q", kind, name)
	}
	return found, nil
}

// OfKind returns the rendered objects of one kind, in rendering order.
func OfKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// Into converts a rendered object into a typed one, rejecting any field the
// type does not know, so a misspelled key fails instead of vanishing.
func Into(obj *unstructured.Unstructured, typed any) error {
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return fmt.Errorf("encoding %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	if err := yaml.UnmarshalStrict(data, typed); err != nil {
		return fmt.Errorf("decoding %s %s strictly: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

// WebhookConfigurations returns the single rendered Mutating and Validating
// webhook configuration, decoded strictly.
func WebhookConfigurations(objs []*unstructured.Unstructured) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	ms, vs := OfKind(objs, "MutatingWebhookConfiguration"), OfKind(objs, "ValidatingWebhookConfiguration")
	if len(ms) != 1 || len(vs) != 1 {
		return nil, nil, fmt.Errorf("want one Mutating and one ValidatingWebhookConfiguration, rendered %d and %d", len(ms), len(vs))
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := Into(ms[0], m); err != nil {
		return nil, nil, err
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := Into(vs[0], v); err != nil {
		return nil, nil, err
	}
	return m, v, nil
}

// CertManagerCRDs returns the paths of cert-manager's CRD manifests
// (deploy/crds/*.yaml) from the module cache, at the version go.mod
// requires, downloading the module if the cache lacks it. The integration
// suite installs them before it server-side-dry-runs the rendered chart.
func CertManagerCRDs() ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "mod", "download", "-json", CertManagerModule)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go mod download %s: %w\n%s%s", CertManagerModule, err, stderr.String(), stdout.String())
	}
	var mod struct {
		Dir, Version, Error string
	}
	if err := json.Unmarshal(stdout.Bytes(), &mod); err != nil {
		return nil, fmt.Errorf("decoding go mod download output: %w", err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return nil, fmt.Errorf("go mod download %s: %s", CertManagerModule, mod.Error)
	}
	files, err := filepath.Glob(filepath.Join(mod.Dir, "deploy", "crds", "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("listing cert-manager CRDs: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRDs in %s/deploy/crds (cert-manager %s)", mod.Dir, mod.Version)
	}
	sort.Strings(files)
	return files, nil
}
