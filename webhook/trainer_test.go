package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/admissionio"
	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/internal/policy"
	"github.com/trainguard/trainguard/internal/testing/builders"
	"github.com/trainguard/trainguard/mutators"
)

// trainJobs is a static TrainJobLookup keyed by namespace/name that
// records what it was asked.
type trainJobs struct {
	m     map[string]map[string]string
	asked []string
}

func (s *trainJobs) lookup(_ context.Context, ns, name string) (map[string]string, bool, error) {
	s.asked = append(s.asked, ns+"/"+name)
	ann, ok := s.m[ns+"/"+name]
	return ann, ok, nil
}

// trainerPod is a pod as JobSet v0.8's Job makes it for TrainJob tj.
func trainerPod(ns, tj string) *builders.PodWrapper {
	return builders.MakePod(ns, tj+"-node-0-0-abcde").With(func(p *corev1.Pod) {
		p.Labels = map[string]string{trainerv1alpha1.LabelJobSetName: tj, trainerv1alpha1.LabelJobSetReplicatedJob: "node", trainerv1alpha1.LabelJobSetJobIndex: "0",
			"batch.kubernetes.io/job-name": tj + "-node-0"}
		p.Spec.Containers = []corev1.Container{{Name: "node", Image: "pytorch/pytorch:2.7.1"}}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: tj + "-node-0", UID: "u", Controller: ptrTo(true)}}
	})
}

func ptrTo[T any](v T) *T { return &v }

func injectPod(t *testing.T, tjs *trainJobs, p *builders.PodWrapper) (*corev1.Pod, Result) {
	t.Helper()
	inj := &Injector{Scope: policy.Scope{Config: configv1alpha1.Default(), Namespaces: namespaces(optedIn())}, TrainJobs: tjs.lookup}
	raw, err := json.Marshal(&p.Pod)
	require.NoError(t, err)
	res, err := inj.Inject(context.Background(), Request{GVK: jobs.Pod().GVK, Namespace: p.Namespace, Raw: raw})
	require.NoError(t, err)
	out, err := admissionio.ApplyPatch(raw, res.Patch)
	require.NoError(t, err)
	var got corev1.Pod
	require.NoError(t, json.Unmarshal(out, &got))
	return &got, res
}

func TestTrainJobPodIsInjectedWithItsTrainJobsPolicy(t *testing.T) {
	tjs := &trainJobs{m: map[string]map[string]string{"team-a/llm": {contract.AnnotationGPULimit: "4", contract.AnnotationCheckpointClaim: "ckpt"}}}
	got, res := injectPod(t, tjs, trainerPod("team-a", "llm"))
	require.Empty(t, res.Skipped)
	assert.Equal(t, []string{"team-a/llm"}, tjs.asked, "the TrainJob is read in the pod's own namespace")
	c := got.Spec.Containers[0]
	assert.NotNil(t, c.Lifecycle.PreStop, "preStop hook on the node container")
	assert.Contains(t, portNames(c), contract.TaskDPortName)
	assert.Equal(t, "4", c.Resources.Limits.Name("nvidia.com/gpu", "").String(), "the TrainJob's gpu-limit reached its pod")
	assert.Equal(t, "ckpt", claimOf(got), "the TrainJob's checkpoint claim reached its pod")
	assert.Equal(t, "true", got.Labels[contract.LabelManaged])
	assert.Contains(t, got.Annotations[contract.AnnotationInjected], "prestop")
	assert.NotEmpty(t, got.Annotations[contract.AnnotationMindClusterRecoverStrategy])
	_, res2 := injectPod(t, tjs, &builders.PodWrapper{Pod: *got})
	assert.Empty(t, res2.Patch, "reinvocation changes nothing")
}

func TestTrainJobPodOptOutAndSpoofing(t *testing.T) {
	tjs := &trainJobs{m: map[string]map[string]string{
		"team-a/off": {contract.AnnotationInject: contract.InjectDisabled},
		"team-a/on":  {},
	}}
	_, res := injectPod(t, tjs, trainerPod("team-a", "off"))
	assert.Contains(t, res.Skipped, "TrainJob off, which opted out")

	_, res = injectPod(t, tjs, trainerPod("team-a", "off").WithAnnotation(contract.AnnotationInject, contract.InjectEnabled))
	assert.Contains(t, res.Skipped, "opted out", "a pod annotation never widens its TrainJob's opt-out")

	_, res = injectPod(t, tjs, trainerPod("team-a", "on").WithAnnotation(contract.AnnotationInject, contract.InjectDisabled))
	assert.NotEmpty(t, res.Skipped, "a pod may still opt itself out")

	_, res = injectPod(t, tjs, trainerPod("team-a", "ghost"))
	assert.Contains(t, res.Skipped, "not a training pod", "labels naming a TrainJob that does not exist opt nothing in")

	_, res = injectPod(t, tjs, trainerPod("team-a", "on").With(func(p *corev1.Pod) {
		p.Labels["trainer.kubeflow.org/trainjob-ancestor-step"] = "dataset-initializer"
	}))
	assert.NotEmpty(t, res.Skipped, "initializer pods are not trainer pods")

	tjs.asked = nil
	_, res = injectPod(t, tjs, trainerPod("team-a", "../../x"))
	assert.NotEmpty(t, res.Skipped)
	assert.Empty(t, tjs.asked, "an invalid name is never looked up")
}

func portNames(c corev1.Container) []string {
	var out []string
	for _, p := range c.Ports {
		out = append(out, p.Name)
	}
	return out
}

func claimOf(p *corev1.Pod) string {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

// TestTrainerKindsAreValidatedNotMutated: the mutating endpoint leaves the
// three kinds alone; the validating endpoint checks them, the
// cluster-scoped runtime with no namespace to opt in.
func TestTrainerKindsAreValidatedNotMutated(t *testing.T) {
	s := testServer(t, logr.Discard())
	ctr := []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"ClusterTrainingRuntime","metadata":{"name":"r"},
"spec":{"mlPolicy":{"torch":{"elasticPolicy":{"minNodes":3,"maxNodes":2}}},"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{"template":{"spec":{"containers":[{"name":"node","image":"i"}]}}}}}]}}}}`)
	gvk := metav1.GroupVersionKind(jobs.ClusterTrainingRuntime().GVK)
	_, out := post(t, s, MutatePath(jobs.ClusterTrainingRuntime().GVK), bytes.NewReader(review(t, admissionv1.Create, gvk, "", ctr, false)), -1)
	require.True(t, out.Response.Allowed)
	assert.Empty(t, out.Response.Patch)
	rec, out := post(t, s, ValidatePath(jobs.ClusterTrainingRuntime().GVK), bytes.NewReader(review(t, admissionv1.Create, gvk, "", ctr, false)), -1)
	require.Equal(t, http.StatusOK, rec.Code)
	require.False(t, out.Response.Allowed)
	assert.Contains(t, out.Response.Result.Message, "spec.mlPolicy.torch.elasticPolicy.maxNodes")

	inj := &Injector{Scope: policy.Scope{Config: configv1alpha1.Default()}}
	tj := []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"j","namespace":"team-a"},"spec":{"runtimeRef":{"name":"r"}}}`)
	res, err := inj.Inject(context.Background(), Request{GVK: jobs.TrainJob().GVK, Raw: tj, OptedIn: true, NamespaceAnnotations: map[string]string{}})
	require.NoError(t, err)
	assert.Contains(t, res.Skipped, "no pod template")
}

// TestTrainerTypesKeepUnknownFields: a patch computed from the partial
// Trainer types touches only what changed; every field they do not
// declare survives byte for byte.
func TestTrainerTypesKeepUnknownFields(t *testing.T) {
	raw := []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainingRuntime","metadata":{"name":"r","namespace":"a"},
"spec":{"podGroupPolicy":{"coscheduling":{"scheduleTimeoutSeconds":60}},"mlPolicy":{"numNodes":2,"torch":{"numProcPerNode":"auto","futureTorch":[1,"x"]}},
"template":{"metadata":{"labels":{"a":"b"}},"spec":{"failurePolicy":{"maxRestarts":3},"successPolicy":{"operator":"All"},"network":{"enableDNSHostnames":true},
"replicatedJobs":[{"name":"node","dependsOn":[{"name":"init","status":"Complete"}],"template":{"metadata":{"labels":{"trainer.kubeflow.org/trainjob-ancestor-step":"trainer"}},
"spec":{"backoffLimit":0,"podFailurePolicy":{"rules":[{"action":"Ignore","onPodConditions":[{"type":"DisruptionTarget"}]}]},
"template":{"spec":{"containers":[{"name":"node","image":"i","futureContainerField":{"k":"v"}}]}}}}}]}}}}`)
	for _, a := range []*jobs.Adapter{jobs.TrainingRuntime(), jobs.ClusterTrainingRuntime()} {
		before, err := a.Decode(raw)
		require.NoError(t, err)
		after, err := a.Decode(raw)
		require.NoError(t, err)
		tpl := after.Templates()[0]
		mutators.TaskD(&mutators.Target{Meta: tpl.Meta, Spec: tpl.Spec, Policy: mustPolicy()})
		var tc admissionio.TypeCache
		ops, err := admissionio.TypedDiff(&tc, raw, before.Object(), after.Object())
		require.NoError(t, err)
		require.NotEmpty(t, ops)
		out, err := admissionio.ApplyPatch(raw, ops)
		require.NoError(t, err)
		for _, path := range [][]string{{"spec", "podGroupPolicy"}, {"spec", "template", "spec", "failurePolicy"}, {"spec", "template", "spec", "successPolicy"},
			{"spec", "template", "spec", "network"}, {"spec", "template", "metadata"}} {
			assert.JSONEq(t, subtree(t, raw, path), subtree(t, out, path), "%s: %v must survive", a.Name, path)
		}
		assert.Contains(t, string(out), `"dependsOn":[{"name":"init","status":"Complete"}]`)
		assert.Contains(t, string(out), `"podFailurePolicy":{"rules":[{"action":"Ignore","onPodConditions":[{"type":"DisruptionTarget"}]}]}`)
		assert.Contains(t, string(out), `"futureContainerField":{"k":"v"}`)
		assert.Contains(t, string(out), `"futureTorch":[1,"x"]`)
		assert.Contains(t, string(out), `"taskd-port"`, "the change itself is in the patch")
	}
}

func mustPolicy() *contract.Policy {
	p, _ := policy.Resolve(configv1alpha1.Default(), nil, nil)
	return p
}

// TestTrainerPodIsValidatedAgainstItsTrainJobsPolicy: a TrainJob that
// turned TaskD off may use port 9601 for its own purpose; its pod, injected
// without TaskD, must not then be refused by the pod validator judging the
// pod's own annotations alone.
func TestTrainerPodIsValidatedAgainstItsTrainJobsPolicy(t *testing.T) {
	tjs := &trainJobs{m: map[string]map[string]string{"team-a/metrics": {contract.AnnotationTaskD: contract.InjectDisabled}}}
	s := NewServer(Options{Config: configv1alpha1.Default(), TrainJobs: tjs.lookup}, namespaces(optedIn()), nil, logr.Discard())
	p := trainerPod("team-a", "metrics").With(func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9601}}
	})
	raw, err := json.Marshal(&p.Pod)
	require.NoError(t, err)
	_, out := post(t, s, PathMutatePod, bytes.NewReader(review(t, admissionv1.Create, podGVK(), "team-a", raw, false)), -1)
	require.True(t, out.Response.Allowed)
	mutated, err := admissionio.ApplyPatch(raw, decodePatch(t, out.Response.Patch))
	require.NoError(t, err)
	assert.NotContains(t, string(mutated), contract.TaskDPortName, "the TrainJob turned TaskD off")
	assert.Contains(t, string(mutated), contract.AnnotationInjected)
	_, vout := post(t, s, PathValidatePod, bytes.NewReader(review(t, admissionv1.Create, podGVK(), "team-a", mutated, false)), -1)
	assert.True(t, vout.Response.Allowed, "validated with the TrainJob's policy: %v", vout.Response.Result)

	// Without its TrainJob's policy, the same pod would have been refused.
	bare := NewServer(Options{Config: configv1alpha1.Default()}, namespaces(optedIn()), nil, logr.Discard())
	_, vout = post(t, bare, PathValidatePod, bytes.NewReader(review(t, admissionv1.Create, podGVK(), "team-a", mutated, false)), -1)
	assert.False(t, vout.Response.Allowed)
}

func decodePatch(t *testing.T, b []byte) []jsonpatch.Operation {
	t.Helper()
	var ops []jsonpatch.Operation
	require.NoError(t, json.Unmarshal(b, &ops))
	return ops
}
