package scale

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/testing/builders"
)

func nodeName(i int) string           { return fmt.Sprintf("kwok-node-%05d", i) }
func zoneName(z int) string           { return fmt.Sprintf("zone-%02d", z) }
func tenantName(i int) string         { return fmt.Sprintf("tenant-%02d", i) }
func otherNSName(i int) string        { return fmt.Sprintf("other-%02d", i) }
func (o Options) zoneOf(node int) int { return node % o.Zones }

// parallel runs f(0..n-1) from o.Clients goroutines; the first error wins.
func (o Options) parallel(n int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range o.Clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || first.Load() != nil {
					return
				}
				if err := retry(func() error { return f(i) }); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		return err
	}
	return nil
}

// retry runs f up to 5 times, a second apart: on a starved machine a
// webhook call or the API server fails now and then (a broken pipe, a
// timeout), as a controller's create would and as it would retry. An
// object that exists already (the failed attempt did land) is done.
func retry(f func() error) error {
	var err error
	for range 5 {
		if err = f(); err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		time.Sleep(time.Second)
	}
	return err
}

// createNodes creates the KWOK nodes, zone z = i mod Zones; zone 0 is
// the outage instance's, so the outage scenario can silence it alone, and
// zone 1 is silenced by the second outage (its nodes move to their own
// instance then).
func (e *env) createNodes(ctx context.Context) error {
	return e.o.parallel(e.o.Nodes, func(i int) error {
		group := "rest"
		if e.o.zoneOf(i) == 0 {
			group = "outage"
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        nodeName(i),
			Labels:      map[string]string{zoneLabel: zoneName(e.o.zoneOf(i)), kwokGroupLabel: group, "type": "kwok"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		}}
		return e.c.Create(ctx, n)
	})
}

// createNamespaces makes the tenants (opted in) and the namespaces of
// other workloads, and waits until trainguard mirrored every opt-in.
func (e *env) createNamespaces(ctx context.Context) error {
	for i := range e.o.Namespaces {
		if err := e.c.Create(ctx, optedIn(tenantName(i))); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	for i := range otherNamespaces {
		if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: otherNSName(i)}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	for i := range e.o.Namespaces {
		if err := waitFor(ctx, time.Minute, func() (bool, error) {
			ns := &corev1.Namespace{}
			err := e.c.Get(ctx, client.ObjectKey{Name: tenantName(i)}, ns)
			return err == nil && ns.Labels[contract.LabelInjectEnabled] == contract.InjectEnabled, nil
		}); err != nil {
			return fmt.Errorf("namespace %s never got the opt-in label: %w", tenantName(i), err)
		}
	}
	return nil
}

// otherNamespaces hold the pods of other workloads (not opted in).
const otherNamespaces = 5

// jobPod is pod `idx` of a job, as the training operator creates it from
// the job's (injected) Worker template: owned by the job, its job-name
// label, already placed on node (no scheduler runs), restartPolicy Never
// as kubeflow's ExitCode policy sets it, and recover-strategy "recover" so
// a retryable exit migrates the pod (the churn scenario's token buckets;
// with the default recover-in-place the kubelet would restart it in place).
func jobPod(tmpl *corev1.PodTemplateSpec, ns, job string, uid types.UID, idx, node int) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	p.Namespace, p.Name = ns, fmt.Sprintf("%s-worker-%d", job, idx)
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Labels[kubeflowv1.LabelJobName] = job
	p.Annotations[contract.AnnotationRecoverStrategy] = "recover"
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	if node >= 0 {
		p.Spec.NodeName = nodeName(node)
	}
	if uid != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Name: job, UID: uid,
			Controller: builders.Ptr(true), BlockOwnerDeletion: builders.Ptr(true)}}
	}
	return p
}

// workerTemplate is the Worker template of a job as the API server stored
// it (trainguard's mutating webhook injected it).
func workerTemplate(job *unstructured.Unstructured) (*corev1.PodTemplateSpec, error) {
	t, err := replicaTemplate(job, kubeflowv1.ReplicaWorker)
	if err != nil {
		return nil, err
	}
	if t.Labels[contract.LabelManaged] != "true" {
		return nil, fmt.Errorf("job %s's Worker template was not injected (labels %v)", job.GetName(), t.Labels)
	}
	return t, nil
}

// replicaTemplate is the template of replica type rt of a job as the API
// server stored it.
func replicaTemplate(job *unstructured.Unstructured, rt string) (*corev1.PodTemplateSpec, error) {
	raw, ok, err := unstructured.NestedMap(job.Object, "spec", "pytorchReplicaSpecs", rt, "template")
	if err != nil || !ok {
		return nil, fmt.Errorf("job %s has no %s template: %v", job.GetName(), rt, err)
	}
	t := &corev1.PodTemplateSpec{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, t); err != nil {
		return nil, err
	}
	return t, nil
}

// createWorkload creates the jobs and their pods, then the other
// workloads' pods, and returns how long it took.
func (e *env) createWorkload(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	perJob := e.o.TrainingPods / e.o.Jobs
	uids := make([]types.UID, e.o.Jobs)
	tmpls := make([]*corev1.PodTemplateSpec, e.o.Jobs)
	if err := e.o.parallel(e.o.Jobs, func(j int) error {
		job := &unstructured.Unstructured{}
		if err := job.UnmarshalJSON(builders.MakeKubeflowJob(tenantName(j%e.o.Namespaces), fmt.Sprintf("job-%05d", j)).WithWorker(int32(perJob - 1)).JSON()); err != nil {
			return err
		}
		err := e.c.Create(ctx, job)
		if apierrors.IsAlreadyExists(err) { // an earlier attempt landed
			err = e.c.Get(ctx, client.ObjectKeyFromObject(job), job)
		}
		if err != nil {
			return fmt.Errorf("creating job %d: %w", j, err)
		}
		uids[j] = job.GetUID()
		tmpls[j], err = workerTemplate(job)
		return err
	}); err != nil {
		return 0, err
	}
	fmt.Fprintf(e.out, "  %d PyTorchJobs created in %s\n", e.o.Jobs, time.Since(start).Round(time.Second))
	t := time.Now()
	if err := e.o.parallel(perJob*e.o.Jobs, func(i int) error {
		j, k := i/perJob, i%perJob
		// A job's pods on consecutive nodes: spread over the zones.
		return e.c.Create(ctx, jobPod(tmpls[j], tenantName(j%e.o.Namespaces), fmt.Sprintf("job-%05d", j), uids[j], k, i%e.o.Nodes))
	}); err != nil {
		return 0, fmt.Errorf("creating training pods: %w", err)
	}
	fmt.Fprintf(e.out, "  %d training pods created in %s (%.0f/s)\n", perJob*e.o.Jobs, time.Since(t).Round(time.Second),
		float64(perJob*e.o.Jobs)/time.Since(t).Seconds())
	t = time.Now()
	if err := e.o.parallel(e.o.OtherPods, func(i int) error {
		p := builders.MakePod(otherNSName(i%otherNamespaces), fmt.Sprintf("web-%06d", i)).WithLabel("app", "web").Obj()
		p.Spec.NodeName = nodeName((i * 7) % e.o.Nodes)
		return e.c.Create(ctx, p)
	}); err != nil {
		return 0, fmt.Errorf("creating other pods: %w", err)
	}
	fmt.Fprintf(e.out, "  %d other pods created in %s\n", e.o.OtherPods, time.Since(t).Round(time.Second))
	return time.Since(start), nil
}

// listPods lists pods in pages (a single list of 60,000 pods is hundreds of
// MB at once).
func (e *env) listPods(ctx context.Context, opts ...client.ListOption) ([]corev1.Pod, error) {
	var all []corev1.Pod
	cont := ""
	for {
		var l corev1.PodList
		if err := e.c.List(ctx, &l, append(opts, client.Limit(5000), client.Continue(cont))...); err != nil {
			return nil, err
		}
		all = append(all, l.Items...)
		if cont = l.Continue; cont == "" {
			return all, nil
		}
	}
}

// waitRunning waits until KWOK has made every pod Running. It asks the API
// server for the pods not Running, metadata only: listing every pod in
// full every 2 s (60,000 at 5,000 nodes) cost the API server more than
// KWOK's status patches it was waiting for.
func (e *env) waitRunning(ctx context.Context, want int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	notRunning := client.MatchingFieldsSelector{Selector: fields.OneTermNotEqualSelector("status.phase", string(corev1.PodRunning))}
	err := waitFor(ctx, timeout, func() (bool, error) {
		var l metav1.PartialObjectMetadataList
		l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := e.c.List(ctx, &l, notRunning); err != nil {
			return false, err
		}
		return len(l.Items) == 0, nil
	})
	if err != nil {
		return time.Since(start), err
	}
	// Every pod the harness created exists (its create returned), so none
	// left outside Running is every one Running; count them to be sure.
	var all metav1.PartialObjectMetadataList
	all.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := e.c.List(ctx, &all); err != nil {
		return time.Since(start), err
	}
	if len(all.Items) < want {
		return time.Since(start), fmt.Errorf("%d pods Running, %d created", len(all.Items), want)
	}
	return time.Since(start), nil
}

// waitFor polls cond every 2 s.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
