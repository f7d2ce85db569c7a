package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// This file is the whole cost of a new job kind: an adapter (a stand-in for
// Kubeflow Trainer's TrainJob, with pod templates under spec.roles) and one
// registration line (fakeKinds). Nothing else in the webhook, the
// validators or the CLI changes for it.

type fakeTrainJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Roles map[string]*fakeRole `json:"roles,omitempty"`
	} `json:"spec,omitempty"`
}

type fakeRole struct {
	Template corev1.PodTemplateSpec `json:"template,omitempty"`
}

// fakeTrainJobKind is the kind: what it is called and how its
// object becomes a Job; every other capability is left unset.
var fakeTrainJobGVK = schema.GroupVersionKind{Group: "trainer.example.io", Version: "v1alpha1", Kind: "FakeTrainJob"}

var fakeTrainJobKind = &jobs.Adapter{
	GVK:    fakeTrainJobGVK,
	Name:   "faketrainjob",
	Decode: jobs.Decoder(fakeTrainJobGVK, func(j *fakeTrainJob) (jobs.Job, error) { return fakeJob{j}, nil }),
}

type fakeJob struct{ *fakeTrainJob }

func (j fakeJob) Object() any              { return j.fakeTrainJob }
func (j fakeJob) Meta() *metav1.ObjectMeta { return &j.ObjectMeta }
func (j fakeJob) Elastic() jobs.Elastic    { return jobs.Elastic{} }
func (j fakeJob) Templates() []jobs.Template {
	return jobs.ReplicaTemplates(j.Spec.Roles, func(r *fakeRole) *corev1.PodTemplateSpec { return &r.Template }, nil, field.NewPath("spec", "roles"))
}

// fakeKinds is the registration line.
func fakeKinds() *jobs.Kinds { k := jobs.Builtin().With(fakeTrainJobKind); return &k }

const fakeTrainJobJSON = `{"apiVersion":"trainer.example.io/v1alpha1","kind":"FakeTrainJob",
 "metadata":{"name":"llm","namespace":"team-a","annotations":{"trainguard.io/gpu-limit":"2"}},
 "spec":{"roles":{"node":{"template":{"spec":{"containers":[{"name":"pytorch","image":"example.com/train:1"}]}}}},
         "futureField":{"kept":true}}}`

func TestNewKindIsServedOverHTTPByItsAdapterAlone(t *testing.T) {
	s := NewServer(Options{Config: configv1alpha1.Default(), Kinds: fakeKinds()}, namespaces(optedIn()), nil, logr.Discard())
	gvk := fakeTrainJobKind.GVK
	path := MutatePath(gvk)
	assert.Equal(t, "/mutate-trainer-example-io-v1alpha1-faketrainjob", path)
	rec, out := post(t, s, path, bytes.NewReader(review(t, admissionv1.Create, metav1.GroupVersionKind(gvk), "team-a", []byte(fakeTrainJobJSON), false)), -1)
	require.Equal(t, http.StatusOK, rec.Code)
	require.True(t, out.Response.Allowed)
	p, err := jsonpatchapply.DecodePatch(out.Response.Patch)
	require.NoError(t, err)
	mutated, err := p.Apply([]byte(fakeTrainJobJSON))
	require.NoError(t, err)
	var got fakeTrainJob
	require.NoError(t, json.Unmarshal(mutated, &got))
	assert.Equal(t, "prestop,taskd,recover-strategy,gpu,restart-rules", got.Annotations[contract.AnnotationInjected], "restart-rules: torchrun's env; the rules are per pod, the kind cannot tell its pods' restartPolicy")
	c := got.Spec.Roles["node"].Template.Spec.Containers[0]
	assert.Equal(t, "2", c.Resources.Limits.Name("nvidia.com/gpu", "").String(), "the job's annotation reached its template")
	assert.Contains(t, string(mutated), `"futureField":{"kept":true}`, "fields the adapter does not declare survive")

	bad := bytes.Replace([]byte(fakeTrainJobJSON), []byte(`gpu-limit":"2"`), []byte(`gpu-limit":"lots"`), 1)
	_, vout := post(t, s, ValidatePath(gvk), bytes.NewReader(review(t, admissionv1.Create, metav1.GroupVersionKind(gvk), "team-a", bad, false)), -1)
	require.False(t, vout.Response.Allowed, "the validating endpoint applies the annotation rules to the new kind")
	assert.Contains(t, vout.Response.Result.Message, "metadata.annotations[trainguard.io/gpu-limit]")
}

func TestNewKindInjectsOfflineAndInLists(t *testing.T) {
	off := NewOffline(configv1alpha1.Default())
	off.Injector.Kinds = fakeKinds()
	list := `{"apiVersion":"v1","kind":"List","items":[` + fakeTrainJobJSON + `]}`
	out, _, err := off.InjectDocument(t.Context(), []byte(list))
	require.NoError(t, err)
	assert.Contains(t, string(out), "trainguard.io/injected: prestop,taskd,recover-strategy,gpu")
	assert.Contains(t, string(out), "kind: List")
}

func TestHandlersServeTheDocumentedPaths(t *testing.T) {
	h := testServer(t, logr.Discard()).Handlers()
	for _, p := range []string{PathMutateKubeflowJob, PathMutateKubeDLJob, PathMutatePod, PathMutateNamespace,
		PathValidateKubeflowJob, PathValidateKubeDLJob, PathValidatePod, PathValidateNamespace} {
		assert.Contains(t, h, p)
	}
	assert.Len(t, h, 16, "8 plus a mutating and a validating endpoint for each Trainer v2 kind and batch Jobs")
}
