//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// schedulerPreemption: a two-rank PyTorchJob with a low PriorityClass
// trains on tg-node-2; a pod with a high PriorityClass that fits there only
// without one of the job's pods arrives; kube-scheduler preempts a pod of
// the job (DisruptionTarget PreemptionByScheduler, deleted with its own
// terminationGracePeriodSeconds), its preStop hook runs and the trainer
// acknowledges a checkpoint; the high-priority pod runs and ends; the
// operator's replacement is scheduled and every rank resumes at the
// acknowledged step.
func (e *env) schedulerPreemption(t *testing.T) {
	ctx := context.Background()
	e.uncordon(ctx, t)
	ns := e.namespace(ctx, t, "e2e-sched-preempt", true)
	urgentNS := e.namespace(ctx, t, "e2e-sched-urgent", false)
	if err := e.priorityClasses(ctx); err != nil {
		t.Fatal(err)
	}
	node, job := e.nodesOf(t)[0], "sched"
	free, err := e.freeCPU(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	// Each rank takes 30% of what is free, the urgent pod 50%: it fits next
	// to one rank but not both, so exactly one pod of the job is preempted.
	rank, urgent := free*3/10, free/2
	t.Logf("%s: %dm CPU free; ranks request %dm each, the urgent pod %dm", node, free, rank, urgent)
	if err := e.createJob(ctx, pinnedJob(ns, job, node, fmt.Sprintf("%dm", rank), schedSteps)); err != nil {
		t.Fatalf("create PyTorchJob: %v", err)
	}
	if err := e.waitStep(ctx, ns, job+"-master-0", 15, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	pods, err := e.jobPods(ctx, ns, job)
	if err != nil {
		t.Fatal(err)
	}
	vs := victimsOf(pods)
	before, err := e.scrapeTrainguard(ctx, "trainguard_checkpoint_total")
	if err != nil {
		t.Fatal(err)
	}
	f := &preemptionFigures{kind: "PyTorchJob", ns: ns, job: job, ranks: 2,
		jobDir: filepath.Join(e.pvDir(ns), ns, "pytorchjob.kubeflow.org", job), before: before}
	t.Logf("urgent pod arrives at master step %d", lastStep(e.logs(ctx, ns, job+"-master-0")))
	f.arrived = time.Now()
	if _, err := e.cs.CoreV1().Pods(urgentNS).Create(ctx, urgentPod(urgentNS, node, fmt.Sprintf("%dm", urgent)), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the high-priority pod: %v", err)
	}
	urgentUp := func() (bool, error) { return e.podsUp(ctx, urgentNS, "e2e.trainguard.io/urgent=true", 1) }
	if f.highRunning, err = e.trackPreemption(ctx, ns, vs, false, urgentUp, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	e.recordPreemption(t, "scheduler preemption", func() (string, error) { return e.afterSchedPreemption(ctx, f, vs, urgentNS) })
	e.deleteNamespace(ctx, urgentNS)
}

// afterSchedPreemption checks who was preempted and why, waits for the job
// to train again and finish, and checks the outcome.
func (e *env) afterSchedPreemption(ctx context.Context, f *preemptionFigures, vs []*victim, urgentNS string) (string, error) {
	for _, v := range vs {
		if v.gone.IsZero() {
			continue
		}
		if v.disruption != "PreemptionByScheduler" {
			return "", fmt.Errorf("pod %s went without DisruptionTarget PreemptionByScheduler (seen %q)", v.name, v.disruption)
		}
		f.victims = append(f.victims, v)
	}
	if len(f.victims) == 0 {
		var st []string
		for _, v := range vs {
			st = append(st, fmt.Sprintf("%s: DisruptionTarget %q", v.name, v.disruption))
		}
		return "", fmt.Errorf("the high-priority pod runs but no pod of the job was seen stopped (%s)", strings.Join(st, "; "))
	}
	if _, err := e.waitPod(ctx, urgentNS, "urgent", 3*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded }); err != nil {
		return "", err
	}
	var err error
	if f.readmitted, err = e.rescheduled(ctx, f.ns, f.victims, 3*time.Minute); err != nil {
		return "", err
	}
	if f.trainingAgain, err = e.stepAfter(ctx, f.ns, f.job+"-master-0", "pytorch", f.readmitted, 5*time.Minute); err != nil {
		return "", err
	}
	if err := e.waitJob(ctx, f.ns, f.job, "Succeeded", 5*time.Minute); err != nil {
		return "", err
	}
	figures, err := f.check(ctx, e, "preempted by kube-scheduler")
	return "preempted " + victimNames(f.victims) + "; " + figures + "; " + e.stepsPastAck(ctx, f), err
}

// stepsPastAck is how many steps the job trained after its acknowledged
// checkpoint while the preempted pod was still there: work thrown away,
// since the job resumes at the acknowledged step. Read from rank 0's log
// (the master pod stays; its earlier container's log included).
func (e *env) stepsPastAck(ctx context.Context, f *preemptionFigures) string {
	ack, _, _, err := newestAckBefore(f.jobDir, f.trainingAgain)
	if err != nil {
		return "steps trained past the ack: unknown"
	}
	pod := f.job + "-master-0"
	prev, _ := e.cs.CoreV1().Pods(f.ns).GetLogs(pod, &corev1.PodLogOptions{Container: "pytorch", Timestamps: true, Previous: true}).DoRaw(ctx)
	log := string(prev) + e.logs(ctx, f.ns, pod)
	var gone time.Time
	for _, v := range f.victims {
		if v.gone.After(gone) {
			gone = v.gone
		}
	}
	last := 0
	for _, l := range strings.Split(log, "\n") {
		m := stepLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if ts, err := time.Parse(time.RFC3339Nano, m[1]); err == nil && ts.Before(gone) {
			last, _ = strconv.Atoi(m[2])
		}
	}
	return fmt.Sprintf("steps trained past the ack (step %d) until the preempted pod was gone: %d, thrown away", int(num(ack, "step")), max(0, last-int(num(ack, "step"))))
}

func victimNames(vs []*victim) string {
	var n []string
	for _, v := range vs {
		n = append(n, v.name+" on "+v.node)
	}
	return strings.Join(n, ", ")
}

// pinnedJob is a two-rank PyTorchJob with the low PriorityClass, both ranks
// on node, the trainer PID 1.
func pinnedJob(ns, name, node, cpu string, steps int) *unstructured.Unstructured {
	job := queuedPyTorchJob(ns, name, "", steps, drainDelay, cpu)
	job.SetLabels(nil)
	for _, rt := range []string{"Master", "Worker"} {
		spec := []string{"spec", "pytorchReplicaSpecs", rt, "template", "spec"}
		_ = unstructured.SetNestedField(job.Object, schedLow, append(spec, "priorityClassName")...)
		_ = unstructured.SetNestedStringMap(job.Object, map[string]string{"kubernetes.io/hostname": node}, append(spec, "nodeSelector")...)
	}
	return job
}

// urgentPod is the high-priority pod: pinned to node, asks for cpu, runs 20 s.
func urgentPod(ns, node, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "urgent", Namespace: ns, Labels: map[string]string{"e2e.trainguard.io/urgent": "true"}},
		Spec: corev1.PodSpec{
			PriorityClassName: schedHigh,
			RestartPolicy:     corev1.RestartPolicyNever,
			NodeSelector:      map[string]string{"kubernetes.io/hostname": node},
			Containers: []corev1.Container{{
				Name: "urgent", Image: trainerImage, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"python3", "-c", "import time; time.sleep(20)"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
			}},
		},
	}
}

// freeCPU is the node's allocatable CPU minus what its pods request, in
// millicores, counted as the scheduler does (containers summed, the largest
// init container if larger).
func (e *env) freeCPU(ctx context.Context, node string) (int64, error) {
	n, err := e.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	free := n.Status.Allocatable.Cpu().MilliValue()
	pods, err := e.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return 0, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		var sum, init int64
		for _, c := range p.Spec.Containers {
			sum += c.Resources.Requests.Cpu().MilliValue()
		}
		for _, c := range p.Spec.InitContainers {
			init = max(init, c.Resources.Requests.Cpu().MilliValue())
		}
		free -= max(sum, init)
	}
	if free < 200 {
		return 0, fmt.Errorf("node %s has only %dm CPU unrequested", node, free)
	}
	return free, nil
}

// rescheduled waits until every preempted pod's replacement is bound to a
// node (the preempting pod has ended) and returns when.
func (e *env) rescheduled(ctx context.Context, ns string, vs []*victim, timeout time.Duration) (time.Time, error) {
	var at time.Time
	err := poll(ctx, 250*time.Millisecond, timeout, func() (bool, error) {
		for _, v := range vs {
			p, err := e.pod(ctx, ns, v.name)
			if err != nil || p == nil || p.UID == v.uid || p.Spec.NodeName == "" {
				return false, err
			}
		}
		at = time.Now()
		return true, nil
	})
	if err != nil {
		return at, fmt.Errorf("replacements of the preempted pods not scheduled: %w", err)
	}
	return at, nil
}

// sample is one series of a scraped metric.
type sample struct {
	labels map[string]string
	value  float64
}

var seriesLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([^ ]+)`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrapeTrainguard reads metric name from every trainguard pod's /metrics
// (HTTPS, authorized by a ServiceAccount token bound to the chart's
// metrics-reader ClusterRole) and returns the series of all of them.
func (e *env) scrapeTrainguard(ctx context.Context, name string) ([]sample, error) {
	token, err := e.metricsToken(ctx)
	if err != nil {
		return nil, err
	}
	pods, err := e.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=trainguard"})
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the scrape's point is the counters, not the certificate
	}}
	var out []sample
	for _, p := range pods.Items {
		if !running(&p) || p.Status.PodIP == "" {
			continue
		}
		s, err := scrapeOne(ctx, client, "https://"+p.Status.PodIP+":8080/metrics", token, name)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		out = append(out, s...)
	}
	return out, nil
}

func scrapeOne(ctx context.Context, client *http.Client, url, token, name string) ([]sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s %v", url, resp.Status, err)
	}
	var out []sample
	for _, l := range strings.Split(string(body), "\n") {
		m := seriesLine.FindStringSubmatch(l)
		if len(m) < 4 || m[1] != name {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[kv[1]] = kv[2]
		}
		out = append(out, sample{labels, v})
	}
	return out, nil
}

func sumMatching(ss []sample, want map[string]string) float64 {
	var sum float64
	for _, s := range ss {
		match := true
		for k, v := range want {
			match = match && s.labels[k] == v
		}
		if match {
			sum += s.value
		}
	}
	return sum
}

// metricsToken is a short-lived token of a ServiceAccount bound to
// trainguard's metrics-reader ClusterRole, as a Prometheus would have.
func (e *env) metricsToken(ctx context.Context) (string, error) {
	const sa, ns = "e2e-metrics", "default"
	_, err := e.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: releaseName + "-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}
	if _, err := e.cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	exp := int64(600)
	tr, err := e.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", ns, sa, err)
	}
	return tr.Status.Token, nil
}
