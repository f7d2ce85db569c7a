package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// newestTestedMinor is the Kubernetes minor the suites run against
// (kube-apiserver v1.37.2, README "Versions tested"): the chart is rendered
// for every minor from its kubeVersion up to this one.
const newestTestedMinor = 37

// servedFrom is, for each Kubernetes feature the chart may render, the first
// minor that serves it with a default API server (GA, or beta and on by
// default). A feature missing here fails the test below, so a template that
// starts using something newer must say from when it is served.
var servedFrom = map[string]int{
	// admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy(Binding): GA in 1.30.
	"ValidatingAdmissionPolicy": 30,
	// Webhook matchConditions: beta (on) in 1.28, GA in 1.30.
	"webhook matchConditions": 28,
	// lifecycle.preStop.sleep (PodLifecycleSleepAction): beta (on) in 1.30.
	"lifecycle sleep action": 30,
	// topologySpreadConstraints[].matchLabelKeys: beta (on) in 1.27.
	"topologySpreadConstraints matchLabelKeys": 27,
	// policy/v1 PodDisruptionBudget: GA in 1.21.
	"policy/v1 PodDisruptionBudget": 21,
}

// chartMinimumMinor reads the lower bound of Chart.yaml's kubeVersion, which
// must have the form ">=1.N.0-0" (the "-0" admits pre-release and vendor
// builds such as v1.30.2-eks-...).
func chartMinimumMinor(t *testing.T, dir string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	require.NoError(t, err)
	var meta struct{ KubeVersion string }
	require.NoError(t, yaml.Unmarshal(data, &meta))
	m := regexp.MustCompile(`^>=1\.([0-9]+)\.0-0$`).FindStringSubmatch(meta.KubeVersion)
	require.NotNil(t, m, "Chart.yaml kubeVersion must be \">=1.N.0-0\" (the oldest Kubernetes the chart works on), is %q", meta.KubeVersion)
	minor, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return minor
}

// featuresOf lists the versioned features the rendered objects use.
func featuresOf(objs []*unstructured.Unstructured) map[string]string {
	found := map[string]string{}
	for _, o := range objs {
		where := o.GetKind() + " " + o.GetName()
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			found["ValidatingAdmissionPolicy"] = where
		case "PodDisruptionBudget":
			found["policy/v1 PodDisruptionBudget"] = where
		case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				if _, ok := h.(map[string]any)["matchConditions"]; ok {
					found["webhook matchConditions"] = where
				}
			}
		case "Deployment":
			spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
			for _, c := range append(sliceOf(spec["containers"]), sliceOf(spec["initContainers"])...) {
				for _, hook := range []string{"preStop", "postStart"} {
					if _, ok, _ := unstructured.NestedMap(c.(map[string]any), "lifecycle", hook, "sleep"); ok {
						found["lifecycle sleep action"] = where
					}
				}
			}
			for _, tsc := range sliceOf(spec["topologySpreadConstraints"]) {
				if _, ok := tsc.(map[string]any)["matchLabelKeys"]; ok {
					found["topologySpreadConstraints matchLabelKeys"] = where
				}
			}
		}
	}
	return found
}

func sliceOf(v any) []any {
	s, _ := v.([]any)
	return s
}

// TestChartKubeVersionMatchesWhatItRenders: the chart's minimum Kubernetes
// is exactly the newest "served from" of the features it renders (in its
// defaults and every value combination), not older (an install would fail
// halfway or lose its second fence) and not newer (no reason to refuse).
func TestChartKubeVersionMatchesWhatItRenders(t *testing.T) {
	helm, dir := helmAndChart(t)
	minimum := chartMinimumMinor(t, dir)
	needed, because := 0, ""
	combos := append(cases(), renderCase{name: "pod matchConditions", release: "trainguard", namespace: "trainguard-system",
		set: []string{"webhook.podMatchConditions=true"}})
	for _, tc := range combos {
		objs, err := Render(helm, dir, tc.release, tc.namespace, tc.set...)
		require.NoError(t, err, tc.name)
		for feature, where := range featuresOf(objs) {
			from, known := servedFrom[feature]
			require.True(t, known, "add %q to servedFrom", feature)
			if from > needed {
				needed, because = from, fmt.Sprintf("%s (%s, values %q)", feature, where, tc.name)
			}
		}
	}
	t.Logf("the chart needs Kubernetes 1.%d for %s; Chart.yaml says 1.%d", needed, because, minimum)
	assert.Equal(t, needed, minimum, "Chart.yaml kubeVersion must be >=1.%d.0-0: the chart renders %s", needed, because)
}

// TestChartRendersOnEveryClaimedMinor renders the chart with `helm template
// --kube-version` for every minor it claims, and the minor before, which
// Helm must refuse with a message naming the requirement.
func TestChartRendersOnEveryClaimedMinor(t *testing.T) {
	helm, dir := helmAndChart(t)
	minimum := chartMinimumMinor(t, dir)
	require.LessOrEqual(t, minimum, newestTestedMinor)
	for minor := minimum; minor <= newestTestedMinor; minor++ {
		v := fmt.Sprintf("1.%d.0", minor)
		t.Run(v, func(t *testing.T) {
			objs, err := RenderWith(helm, dir, "trainguard", "trainguard-system", "--kube-version", v)
			require.NoError(t, err)
			for feature, where := range featuresOf(objs) {
				assert.LessOrEqual(t, servedFrom[feature], minor, "%s renders %s, served from 1.%d", v, where, servedFrom[feature])
			}
			assert.Len(t, OfKind(objs, "ValidatingAdmissionPolicy"), 1, "the second fence is rendered on every claimed minor")
		})
	}
	// Vendor builds carry a suffix; they must pass like the plain version.
	_, err := RenderWith(helm, dir, "trainguard", "trainguard-system", "--kube-version", fmt.Sprintf("v1.%d.2-eks-1234", minimum))
	require.NoError(t, err, "a vendor build of the minimum minor")

	older := fmt.Sprintf("1.%d.9", minimum-1)
	_, err = RenderWith(helm, dir, "trainguard", "trainguard-system", "--kube-version", older)
	require.Error(t, err, "Kubernetes %s is older than the chart's minimum and must be refused at install", older)
	assert.Contains(t, err.Error(), "chart requires kubeVersion")
}

// TestDocsStateTheChartMinimum: the READMEs name the minimum Chart.yaml enforces.
func TestDocsStateTheChartMinimum(t *testing.T) {
	_, dir := helmAndChart(t)
	want := fmt.Sprintf("Kubernetes 1.%d or newer", chartMinimumMinor(t, dir))
	root, err := RepoRoot()
	require.NoError(t, err)
	for _, path := range []string{filepath.Join(dir, "README.md"), filepath.Join(root, "README.md")} {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		text := strings.Join(strings.Fields(string(data)), " ")
		assert.Contains(t, text, want, "%s must state the chart's minimum Kubernetes", path)
		assert.NotRegexp(t, `Kubernetes 1\.[0-9]+ or newer`, strings.ReplaceAll(text, want, ""), "%s names another minimum", path)
	}
}
