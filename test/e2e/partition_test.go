//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// partition: the kubelet of the node running rank 0 is frozen (SIGSTOP)
// while its containers keep running, as in a network partition or a hung
// kubelet. With the shipped defaults trainguard sees the silent kubelet,
// force-deletes the pod and the job runs again elsewhere; the old process
// (the zombie) keeps training and tries to commit. Asserted: none of its
// commits after the replacement started is the job's latest, the
// replacement trains on from its own line, and once the kubelet resumes the
// zombie's processes are stopped.
func (e *env) partition(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-partition", true)
	const job = "zombie"
	script := trainScript(job, 5000, 0.3, 10)
	pj := pytorchJob(ns, job, replica{1, "OnFailure", script}, replica{1, "OnFailure", script}, false)
	// The worker on another node: with both ranks on the partitioned node
	// the zombie is the whole job, blocked in a collective for ever, and
	// never tries a commit to be refused.
	spreadRanks(pj)
	if err := e.createJob(ctx, pj); err != nil {
		t.Fatalf("create PyTorchJob: %v", err)
	}
	defer func() { _ = e.dyn.Resource(pytorchJobs).Namespace(ns).Delete(ctx, job, metav1.DeleteOptions{}) }()
	master := job + "-master-0"
	if err := e.waitStep(ctx, ns, master, 25, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	old, err := e.pod(ctx, ns, master)
	if err != nil || old == nil {
		t.Fatalf("master pod: %v", err)
	}
	if w, _ := e.pod(ctx, ns, job+"-worker-0"); w != nil && w.Spec.NodeName == old.Spec.NodeName {
		t.Fatalf("both ranks run on %s despite spreadRanks: the scenario needs the worker on another node", old.Spec.NodeName)
	}
	idx := strings.TrimPrefix(old.Spec.NodeName, "tg-node-")
	zombieGen, err := generationIn(e.logs(ctx, ns, master))
	if err != nil {
		t.Fatalf("the zombie-to-be: %v", err)
	}
	t.Logf("freezing the kubelet of %s (rank 0, generation %d) at step %d", old.Spec.NodeName, zombieGen, lastStep(e.logs(ctx, ns, master)))
	tFreeze := time.Now()
	if _, err := e.run(ctx, "bash", "hack/cluster/node-ctl.sh", "freeze", idx); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_, _ = e.run(ctx, "bash", "hack/cluster/node-ctl.sh", "thaw", idx)
		}
	}()
	rep, recovered, err := e.replacementTrains(ctx, ns, master, old, tFreeze)
	if err != nil {
		t.Fatal(err)
	}
	refused, err := e.zombieRefuses(ctx, idx, old)
	if err != nil {
		t.Fatal(err)
	}
	line, err := e.replacementLine(ctx, ns, job, rep, zombieGen)
	if err != nil {
		t.Fatal(err)
	}
	if n := podProcesses(idx, string(old.UID)); n == 0 {
		t.Fatalf("the zombie pod has no processes left while its kubelet is frozen: nothing to stop")
	}
	tThaw := time.Now()
	if _, err := e.run(ctx, "bash", "hack/cluster/node-ctl.sh", "thaw", idx); err != nil {
		t.Fatal(err)
	}
	thawed = true
	if err := poll(ctx, 2*time.Second, 3*time.Minute, func() (bool, error) { return podProcesses(idx, string(old.UID)) == 0, nil }); err != nil {
		t.Fatalf("the zombie pod still runs %d process(es) 3 min after its kubelet resumed", podProcesses(idx, string(old.UID)))
	}
	stopped := time.Since(tThaw)
	e.waitNodeReady(ctx, t, idx)
	e.record("partition", true, "kubelet frozen → training advancing again elsewhere %s (shipped defaults); zombie (generation %d) refused %d commit(s); %s; zombie stopped %s after the kubelet resumed",
		recovered.Round(time.Second), zombieGen, refused, line, stopped.Round(time.Second))
}

// replacementTrains waits for a new master pod (another UID, another node)
// that completes a step after t, and returns it and the time it took.
func (e *env) replacementTrains(ctx context.Context, ns, master string, old *corev1.Pod, t time.Time) (*corev1.Pod, time.Duration, error) {
	var rep *corev1.Pod
	var at time.Time
	why := "no replacement yet"
	err := poll(ctx, 2*time.Second, 4*time.Minute, func() (bool, error) {
		p, err := e.pod(ctx, ns, master)
		if err != nil || p == nil || p.UID == old.UID || !startedAfter(p, t, "pytorch") {
			return false, err
		}
		if p.Spec.NodeName == old.Spec.NodeName {
			return false, stop(fmt.Errorf("the replacement runs on the frozen node %s", p.Spec.NodeName))
		}
		why = "replacement started, no step yet"
		ts, _, ok := firstStepAfter(e.logs(ctx, ns, master), t)
		rep, at = p, ts
		return ok, nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("no recovery within 4 min of the freeze (%s): %w", why, err)
	}
	return rep, at.Sub(t), nil
}

var refusedLine = regexp.MustCompile(`trainguard: commit (\d+) refused: generation (\d+)`)

// zombieRefuses reads the zombie's container log from its node's log
// directory (the frozen kubelet cannot serve it) until it shows a refused
// commit, and returns how many it refused.
func (e *env) zombieRefuses(ctx context.Context, idx string, old *corev1.Pod) (int, error) {
	pattern := filepath.Join(clusterDir, "nodes", idx, "pod-logs", fmt.Sprintf("%s_%s_%s", old.Namespace, old.Name, old.UID), "pytorch", "*.log")
	refused := 0
	err := poll(ctx, 2*time.Second, 3*time.Minute, func() (bool, error) {
		files, _ := filepath.Glob(pattern)
		refused = 0
		for _, f := range files {
			b, _ := os.ReadFile(f)
			refused += len(refusedLine.FindAllString(string(b), -1))
		}
		return refused > 0, nil
	})
	if err != nil {
		return 0, fmt.Errorf("the zombie never had a commit refused (log %s): %w", pattern, err)
	}
	return refused, nil
}

// replacementLine checks the job directory on the claim: the latest
// checkpoint is the replacement's generation, newer than the zombie's, and
// ahead of where the replacement resumed; no commit of the zombie's
// generation is newer than that resume point.
func (e *env) replacementLine(ctx context.Context, ns, job string, rep *corev1.Pod, zombieGen int) (string, error) {
	repGen, err := generationIn(e.logs(ctx, ns, rep.Name))
	if err != nil {
		return "", fmt.Errorf("the replacement: %w", err)
	}
	resumed := resumedStep(e.logs(ctx, ns, rep.Name))
	var latest map[string]any
	dir := ""
	err = poll(ctx, 2*time.Second, 2*time.Minute, func() (bool, error) {
		dirs, _ := filepath.Glob(filepath.Join(e.pvDir(ns), ns, "*", job))
		for _, d := range dirs {
			if l, _, err := newestJSON(d, "trainguard-latest.json"); err == nil {
				latest, dir = l, d
			}
		}
		return latest != nil && int(num(latest, "generation")) == repGen && int(num(latest, "step")) > resumed, nil
	})
	if err != nil {
		return "", fmt.Errorf("the job's latest checkpoint is not the replacement's (generation %d, past step %d): %v", repGen, resumed, latest)
	}
	if repGen <= zombieGen {
		return "", fmt.Errorf("the replacement's generation %d is not newer than the zombie's %d", repGen, zombieGen)
	}
	commits, _ := filepath.Glob(filepath.Join(dir, "trainguard-ckpt-*", "state.json"))
	for _, c := range commits {
		st, _, err := newestJSON(filepath.Dir(c), "state.json")
		if err == nil && int(num(st, "generation")) == zombieGen && int(num(st, "step")) > resumed {
			return "", fmt.Errorf("a commit of the zombie's generation %d at step %d is newer than the replacement's resume at %d: %s", zombieGen, int(num(st, "step")), resumed, c)
		}
	}
	return fmt.Sprintf("job's latest: generation %d step %d (replacement resumed at %d)", repGen, int(num(latest, "step")), resumed), nil
}

var generationLine = regexp.MustCompile(`trainguard: incarnation generation (\d+)`)

func generationIn(log string) (int, error) {
	m := generationLine.FindAllStringSubmatch(log, -1)
	if m == nil {
		return 0, fmt.Errorf("no 'incarnation generation' line in the rank 0 log")
	}
	return strconv.Atoi(m[len(m)-1][1])
}

// resumedStep is the step the log's last resume started at (0: fresh).
func resumedStep(log string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if m := resumedLine.FindStringSubmatch(l); m != nil {
			n, _ = strconv.Atoi(m[2])
		}
	}
	return n
}

// podProcesses counts the processes left in the pod's cgroups on node idx
// (the kubelet's cgroupRoot is /tg-node-<idx>, cgroupfs driver).
func podProcesses(idx, uid string) int {
	n := 0
	for _, pattern := range []string{"/sys/fs/cgroup/pids/tg-node-%s/kubepods*/*/pod%s", "/sys/fs/cgroup/pids/tg-node-%s/kubepods*/pod%s"} {
		dirs, _ := filepath.Glob(fmt.Sprintf(pattern, idx, uid))
		for _, d := range dirs {
			_ = filepath.Walk(d, func(p string, info os.FileInfo, err error) error {
				if err == nil && info.Name() == "cgroup.procs" {
					b, _ := os.ReadFile(p)
					n += len(strings.Fields(string(b)))
				}
				return nil
			})
		}
	}
	return n
}
