package trainer

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/testing/repo"
)

// TestOfflineVerdictIsTheServedReleases: `trainguard validate` judges a
// TrainJob against the CRDs of every supported Trainer release, since
// offline the cluster's is unknown: what every release refuses is an
// error, what only some refuse a warning naming them. The release under
// test's API server (strict field validation, Trainer's and trainguard's
// webhooks) must refuse exactly the inputs that validate refuses or warns
// this release refuses. (test/integration checks the other kinds; its
// control plane serves no Trainer.)
func TestOfflineVerdictIsTheServedReleases(t *testing.T) {
	bin, err := repo.BuildTrainguard(t.TempDir())
	require.NoError(t, err)

	ns := namespace(t, true)
	runtime := v23Runtime(ns, "torch")
	_, _, err = createWithWarnings(t, runtime, metav1.FieldValidationStrict)
	require.NoError(t, err)
	dc, err := dynamic.NewForConfig(env.cp.Config)
	require.NoError(t, err)
	trainJobs := dc.Resource(schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}).Namespace(ns)

	for name, trainer := range map[string]string{
		"valid":                       "trainer: {numNodes: 1}",
		"typos every release knows":   "trainer: {numNode: 2, resourcePerNode: {limits: {nvidia.com/gpu: 1}}}",
		"v2.3 field (runtimePatches)": "runtimePatches: []",
		"v2.3 field with its minimum": "activeDeadlineSeconds: 60",
		"below v2.3's minimum":        "activeDeadlineSeconds: 0",
	} {
		t.Run(name, func(t *testing.T) {
			job := `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: verdict, namespace: ` + ns + `}
spec:
  runtimeRef: {name: torch, kind: TrainingRuntime}
  ` + trainer + "\n"
			code, stdout, stderr, err := repo.Run(bin, strings.NewReader(runtime+"---\n"+job), "validate", "-f", "-")
			require.NoError(t, err)
			require.NotEqual(t, 2, code, stderr)
			offlineRefuses := code == 1 || strings.Contains(stderr, "Kubeflow Trainer "+env.rel.trainer+" refuses it")

			u := &unstructured.Unstructured{}
			require.NoError(t, yaml.Unmarshal([]byte(job), &u.Object))
			_, err = trainJobs.Create(context.Background(), u, metav1.CreateOptions{
				FieldValidation: metav1.FieldValidationStrict, DryRun: []string{metav1.DryRunAll},
			})
			assert.Equal(t, offlineRefuses, err != nil, "%s: offline exit %d (%s%s); the API server: %v",
				env.rel, code, stdout, stderr, err)
		})
	}
}
