//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func mustQty(s string) resource.Quantity { return resource.MustParse(s) }

// replica is one PyTorchJob replica type: its count, restart policy and the
// shell script its `pytorch` container runs.
type replica struct {
	count         int
	restartPolicy string
	script        string
}

// pytorchJob builds a kubeflow.org/v1 PyTorchJob as a user writes it: no
// trainguard fields, only the image, the command and the restart policies.
func pytorchJob(ns, name string, master, worker replica, suspend bool) *unstructured.Unstructured {
	spec := func(r replica) map[string]any {
		return map[string]any{
			"replicas":      int64(r.count),
			"restartPolicy": r.restartPolicy,
			"template": map[string]any{"spec": map[string]any{
				"terminationGracePeriodSeconds": int64(30),
				"containers": []any{map[string]any{
					"name": "pytorch", "image": trainerImage, "imagePullPolicy": "Never",
					"command":   []any{"/bin/sh", "-c", r.script},
					"resources": map[string]any{"requests": map[string]any{"cpu": "50m", "memory": "200Mi"}},
				}},
			}},
		}
	}
	replicas := map[string]any{"Master": spec(master)}
	if worker.count > 0 {
		replicas["Worker"] = spec(worker)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1",
		"kind":       "PyTorchJob",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"runPolicy":           map[string]any{"suspend": suspend, "backoffLimit": int64(20)},
			"pytorchReplicaSpecs": replicas,
		},
	}}
}

// spreadRanks makes the scheduler prefer a node without another pod of the
// job for each of its pods (the training operator labels them with the
// job's name): a scenario that partitions rank 0's node needs its worker
// elsewhere. Only a preference: a replacement goes where there is room.
func spreadRanks(pj *unstructured.Unstructured) {
	term := map[string]any{"weight": int64(100), "podAffinityTerm": map[string]any{
		"topologyKey":   "kubernetes.io/hostname",
		"labelSelector": map[string]any{"matchLabels": map[string]any{"training.kubeflow.org/job-name": pj.GetName()}},
	}}
	for _, r := range pj.Object["spec"].(map[string]any)["pytorchReplicaSpecs"].(map[string]any) {
		spec := r.(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		spec["affinity"] = map[string]any{"podAntiAffinity": map[string]any{
			"preferredDuringSchedulingIgnoredDuringExecution": []any{term}}}
	}
}

// trainScript runs the repository's example trainer (data-parallel over gloo, the
// trainguard SDK) and writes its state dumps under /checkpoint/e2e-dumps/JOB,
// on the shared claim, where the harness reads them from the host.
//
// The trainer is not PID 1: the kernel drops signals whose action is the
// default for a PID namespace's init, so a python3 PID 1 without its own
// handler ignores the kubelet's SIGTERM and trains on until SIGKILL at the
// end of the grace period. sh forwards SIGTERM to it instead.
func trainScript(job string, steps int, delay float64, saveEvery int) string {
	return trainScriptWith("python3", job, steps, delay, saveEvery)
}

// trainScriptWith is trainScript with another launcher: "python3 -m
// torch.distributed.run" for a TrainJob, whose pods get torchrun's PET_* env.
func trainScriptWith(launcher, job string, steps int, delay float64, saveEvery int) string {
	d := "/checkpoint/e2e-dumps/" + job
	return strings.Join([]string{
		"mkdir -p " + d + " || exit 1",
		fmt.Sprintf("%s /opt/trainguard/trainer/train.py --steps %d --step-delay %g --save-every %d --dump-state %s/resumed --dump-final %s/final & pid=$!",
			launcher, steps, delay, saveEvery, d, d),
		`trap 'kill -TERM $pid' TERM`,
		`wait $pid; rc=$?`,
		`if kill -0 $pid 2>/dev/null; then wait $pid; rc=$?; fi`,
		`exit $rc`,
	}, "; ")
}

// trainArgv is the trainer's command for in-process recovery as a user
// writes it, python3 itself with no shell, so the supervisor (PID 1, which
// forwards SIGTERM) starts it by fork() with torch preloaded and sees it die
// of its own signal. The rank-crash scenario reads no dumps.
func trainArgv(steps int, delay float64, saveEvery int) []any {
	return []any{"python3", "/opt/trainguard/trainer/train.py", "--steps", strconv.Itoa(steps),
		"--step-delay", strconv.FormatFloat(delay, 'g', -1, 64), "--save-every", strconv.Itoa(saveEvery)}
}

// withCommand gives every replica of a pytorchJob the command argv instead of its script.
func withCommand(pj *unstructured.Unstructured, argv []any) {
	for _, r := range pj.Object["spec"].(map[string]any)["pytorchReplicaSpecs"].(map[string]any) {
		c := r.(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0]
		c.(map[string]any)["command"] = argv
	}
}

// sleepScript keeps a replica alive without training (exit-code scenarios).
const sleepScript = "exec python3 -c 'import time; time.sleep(3600)'"

// exitOnceScript exits with code on its first run (a marker on the shared
// claim remembers it) and then sleeps, so a retried pod stays up. The exit
// code comes from a child process, as from a trainer killed by the kernel:
// PID 1 of a container cannot kill itself with SIGKILL.
func exitOnceScript(marker string, code int) string {
	m := "/checkpoint/e2e-markers/" + marker
	var die string
	if code == 137 {
		die = `python3 -c 'import os; os.kill(os.getpid(), 9)'; exit $?`
	} else {
		die = fmt.Sprintf("exit %d", code)
	}
	return fmt.Sprintf("mkdir -p /checkpoint/e2e-markers; if [ ! -e %s ]; then touch %s; %s; fi; %s", m, m, die, sleepScript)
}
