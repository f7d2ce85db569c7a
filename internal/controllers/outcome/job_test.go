package outcome

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trainguard/trainguard/internal/controllers/ownerchain"
	"github.com/trainguard/trainguard/internal/jobs"
)

// metaOf builds an object's metadata, controlled by owner when it is set.
func metaOf(gvk schema.GroupVersionKind, ns, name string, uid types.UID, owner *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid}}
	o.SetGroupVersionKind(gvk)
	if owner != nil {
		o.OwnerReferences = []metav1.OwnerReference{ref(owner)}
	}
	return o
}

// chainKinds are the kinds of a TrainJob's chain (Job, JobSet, TrainJob)
// and the kubeflow PyTorchJob, with a REST mapper that knows them.
func chainKinds() (jobGVK, jobSetGVK, trainJobGVK, pytorch schema.GroupVersionKind, mapper *meta.DefaultRESTMapper) {
	chain := ownerchain.TrainJobChain()
	pytorch = jobs.KubeflowPyTorchJob().GVK
	mapper = meta.NewDefaultRESTMapper(nil)
	for _, gvk := range append(chain, pytorch) {
		mapper.Add(gvk, meta.RESTScopeNamespace)
	}
	return chain[0], chain[1], chain[2], pytorch, mapper
}

// unstructuredOf is o's metadata as the object the fake client stores.
func unstructuredOf(o *metav1.PartialObjectMetadata) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(o.GroupVersionKind())
	u.SetNamespace(o.Namespace)
	u.SetName(o.Name)
	u.SetUID(o.UID)
	u.SetOwnerReferences(o.OwnerReferences)
	return u
}

func ref(o *metav1.PartialObjectMetadata) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID, Controller: ptr.To(true)}
}

// TestTrainJobChain follows Job → JobSet → TrainJob and stops at the first
// hop a tenant could have forged.
func TestTrainJobChain(t *testing.T) {
	jobGVK, jobSetGVK, trainJobGVK, pytorch, mapper := chainKinds()

	tj := metaOf(trainJobGVK, "team", "tj", "tj-uid", nil)
	js := metaOf(jobSetGVK, "team", "tj", "js-uid", tj)
	job := metaOf(jobGVK, "team", "tj-node-0", "job-uid", js)
	otherTJ := metaOf(trainJobGVK, "other", "far", "far-uid", nil)
	jsFar := metaOf(jobSetGVK, "team", "far", "jsfar-uid", otherTJ)
	jobFar := metaOf(jobGVK, "team", "far-node-0", "jobfar-uid", jsFar)
	pj := metaOf(pytorch, "team", "pj", "pj-uid", nil)
	jsPJ := metaOf(jobSetGVK, "team", "pj", "jspj-uid", pj)
	jobPJ := metaOf(jobGVK, "team", "pj-node-0", "jobpj-uid", jsPJ)
	jsLoose := metaOf(jobSetGVK, "team", "loose", "jsloose-uid", tj)
	jsLoose.OwnerReferences[0].Controller = nil
	jobLoose := metaOf(jobGVK, "team", "loose-node-0", "jobloose-uid", jsLoose)
	jsWrongUID := metaOf(jobSetGVK, "team", "wrong", "jswrong-uid", tj)
	jsWrongUID.OwnerReferences[0].UID = "not-tj-uid"
	jobWrongUID := metaOf(jobGVK, "team", "wrong-node-0", "jobwrong-uid", jsWrongUID)
	plain := metaOf(jobGVK, "team", "plain", "plain-uid", nil)
	cron := metaOf(schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, "team", "nightly", "cron-uid", nil)
	ofCron := metaOf(jobGVK, "team", "nightly-1", "ofcron-uid", cron)

	var objs []client.Object
	for _, o := range []*metav1.PartialObjectMetadata{tj, js, job, otherTJ, jsFar, jobFar, pj, jsPJ, jobPJ, jsLoose, jobLoose, jsWrongUID, jobWrongUID, plain, cron, ofCron} {
		// The fake client stores kinds its scheme lacks only as unstructured.
		objs = append(objs, unstructuredOf(o))
	}
	c := fake.NewClientBuilder().WithRESTMapper(mapper).WithObjects(objs...).Build()
	r := &Reconciler{apiReader: c, chains: ownerchain.New(jobs.Builtin())}
	ctx := logr.NewContext(context.Background(), logr.Discard())
	forged := ref(job)
	forged.UID = "forged"

	for name, tc := range map[string]struct {
		owner metav1.OwnerReference
		want  types.UID
	}{
		"the TrainJob":                          {ref(job), tj.UID},
		"PyTorchJob as before":                  {ref(pj), pj.UID},
		"pod names the Job with another UID":    {forged, ""},
		"Job that does not exist":               {metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: "ghost", UID: "job-uid"}, ""},
		"TrainJob in another namespace":         {ref(jobFar), ""},
		"JobSet controlled by a PyTorchJob":     {ref(jobPJ), ""}, // and its Job is the JobSet's
		"JobSet owned, but not controlled":      {ref(jobLoose), ""},
		"JobSet names the TrainJob's UID wrong": {ref(jobWrongUID), ""},
		"a user's own Job is the job":           {ref(plain), plain.UID},
		"a CronJob's Job is nobody's":           {ref(ofCron), ""},
		"pod names a JobSet directly":           {ref(js), ""},
		"pod names the TrainJob directly":       {ref(tj), ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := r.job(ctx, item{Namespace: "team", Owner: tc.owner})
			if tc.want == "" {
				assert.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			assert.Equal(t, tc.want, got.UID)
			assert.Equal(t, got.GroupVersionKind(), schema.FromAPIVersionAndKind(got.APIVersion, got.Kind), "the Event's reference needs the kind")
			assert.NotEmpty(t, got.Kind)
		})
	}
}

// TestSuspendedOnChain reads the suspend field of each hop and the Kueue
// queue label, and follows only what ownerchain follows.
func TestSuspendedOnChain(t *testing.T) {
	jobGVK, jobSetGVK, trainJobGVK, pytorch, mapper := chainKinds()
	obj := func(m *metav1.PartialObjectMetadata, suspend bool, queue string, path ...string) *unstructured.Unstructured {
		u := unstructuredOf(m)
		if queue != "" {
			u.SetLabels(map[string]string{KueueQueueLabel: queue})
		}
		require.NoError(t, unstructured.SetNestedField(u.Object, suspend, path...))
		return u
	}
	tj := metaOf(trainJobGVK, "team", "tj", "tj-uid", nil)
	js := metaOf(jobSetGVK, "team", "tj", "js-uid", tj)
	job := metaOf(jobGVK, "team", "tj-node-0", "job-uid", js)
	pj := metaOf(pytorch, "team", "pj", "pj-uid", nil)
	pjFree := metaOf(pytorch, "team", "free", "free-uid", nil)
	plain := metaOf(jobGVK, "team", "plain", "plain-uid", nil)
	// A scheme of its own: the fake client records kinds it stored as
	// metadata only in the shared scheme, which would drop the spec here.
	c := fake.NewClientBuilder().WithScheme(runtime.NewScheme()).WithRESTMapper(mapper).WithObjects(
		obj(tj, true, "team-queue", "spec", "suspend"), obj(js, false, "", "spec", "suspend"), obj(job, false, "", "spec", "suspend"),
		obj(pj, true, "", "spec", "runPolicy", "suspend"), obj(pjFree, false, "q", "spec", "runPolicy", "suspend"),
		obj(plain, true, "batch-queue", "spec", "suspend"),
	).Build()
	ctx := context.Background()
	forged := ref(tj)
	forged.UID = "forged"
	for name, tc := range map[string]struct {
		owner     metav1.OwnerReference
		suspended bool
		queue     string
	}{
		"TrainJob suspended by Kueue, read through Job and JobSet": {ref(job), true, "team-queue"},
		"PyTorchJob runPolicy.suspend, no queue":                   {ref(pj), true, ""},
		"PyTorchJob running":                                       {ref(pjFree), false, "q"},
		"plain batch Job":                                          {ref(plain), true, "batch-queue"},
		"another UID":                                              {forged, false, ""},
	} {
		s, q, err := suspendedOnChain(ctx, c, "team", tc.owner)
		require.NoError(t, err, name)
		assert.Equal(t, tc.suspended, s, name)
		assert.Equal(t, tc.queue, q, name)
	}
}
