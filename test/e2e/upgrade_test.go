//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// upgradeUnderLoad: `helm upgrade` (a changed pod annotation rolls both
// replicas) while pods are being created, by the harness and by the
// operator for a PyTorchJob. No creation is refused and no pod is injected
// twice.
func (e *env) upgradeUnderLoad(t *testing.T) {
	ctx := context.Background()
	ns := e.namespace(ctx, t, "e2e-upgrade", true)
	// The job's pods never get a node (no node has the label): admission only.
	pending := replica{6, "OnFailure", sleepScript}
	job := pytorchJob(ns, "load", replica{1, "OnFailure", sleepScript}, pending, false)
	for _, rt := range []string{"Master", "Worker"} {
		spec := job.Object["spec"].(map[string]any)["pytorchReplicaSpecs"].(map[string]any)[rt].(map[string]any)
		spec["template"].(map[string]any)["spec"].(map[string]any)["nodeSelector"] = map[string]any{"e2e.trainguard.io/none": "true"}
	}
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, failures := 0, []string{}
	wg.Add(1)
	go func() { // one pod every 100 ms until told to stop
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			case <-time.After(100 * time.Millisecond):
			}
			_, err := e.cs.CoreV1().Pods(ns).Create(ctx, pendingPod(ns, fmt.Sprintf("load-%d", i)), metav1.CreateOptions{})
			mu.Lock()
			if err != nil {
				failures = append(failures, err.Error())
			} else {
				created++
			}
			mu.Unlock()
		}
	}()
	time.Sleep(2 * time.Second)
	if err := e.createJob(ctx, job); err != nil {
		mu.Lock()
		failures = append(failures, "PyTorchJob: "+err.Error())
		mu.Unlock()
	}
	start := time.Now()
	_, upErr := e.helmUpgrade(ctx, fmt.Sprintf("podAnnotations: {e2e.trainguard.io/rev: %q}\n", time.Now().Format(time.RFC3339Nano)))
	upgrade := time.Since(start)
	time.Sleep(5 * time.Second) // keep creating against the new replicas
	close(stopLoad)
	wg.Wait()
	if upErr != nil {
		t.Fatalf("helm upgrade: %v", upErr)
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d creations refused during the upgrade, first: %s", len(failures), created+len(failures), failures[0])
	}
	checked, err := e.checkSingleInjection(ctx, ns, 7)
	if err != nil {
		t.Fatal(err)
	}
	e.record("upgrade under load", true, "helm upgrade %s (both replicas rolled) during %d pod creations + a 7-pod PyTorchJob: 0 refused, %d pods injected exactly once",
		upgrade.Round(time.Second), created, checked)
}

// helmUpgrade re-applies the e2e values plus extra.
func (e *env) helmUpgrade(ctx context.Context, extra string) (string, error) {
	f, err := os.CreateTemp("", "trainguard-e2e-values-*.yaml")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(values(true, extra)); err != nil {
		return "", err
	}
	f.Close()
	return e.helm(ctx, "upgrade", releaseName, "charts/trainguard", "-n", releaseNS, "--wait", "--timeout", "5m", "-f", f.Name())
}

// checkSingleInjection: every pod in ns is injected, and no injection appears
// twice (init containers, volumes, env, ports, marker entries).
func (e *env) checkSingleInjection(ctx context.Context, ns string, wantJobPods int) (int, error) {
	var pods *corev1.PodList
	err := poll(ctx, 2*time.Second, 2*time.Minute, func() (bool, error) {
		var err error
		pods, err = e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "training.kubeflow.org/job-name=load"})
		return err == nil && len(pods.Items) >= wantJobPods, err
	})
	if err != nil {
		return 0, fmt.Errorf("the operator created %d of %d job pods: %w", len(pods.Items), wantJobPods, err)
	}
	all, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	for _, p := range all.Items {
		if err := injectedOnce(&p); err != nil {
			return 0, err
		}
	}
	return len(all.Items), nil
}

func injectedOnce(p *corev1.Pod) error {
	marker := p.Annotations["trainguard.io/injected"]
	if marker == "" {
		return fmt.Errorf("pod %s not injected", p.Name)
	}
	seen := map[string]bool{}
	dup := func(kind, name string) error {
		if seen[kind+"/"+name] {
			return fmt.Errorf("pod %s: %s %q injected twice (marker %q)", p.Name, kind, name, marker)
		}
		seen[kind+"/"+name] = true
		return nil
	}
	for _, m := range strings.Split(marker, ",") {
		if err := dup("marker entry", m); err != nil {
			return err
		}
	}
	for _, c := range p.Spec.InitContainers {
		if err := dup("init container", c.Name); err != nil {
			return err
		}
	}
	for _, v := range p.Spec.Volumes {
		if err := dup("volume", v.Name); err != nil {
			return err
		}
	}
	for _, c := range p.Spec.Containers {
		for _, env := range c.Env {
			if err := dup(c.Name+" env", env.Name); err != nil {
				return err
			}
		}
		for _, port := range c.Ports {
			if err := dup(c.Name+" port", fmt.Sprint(port.ContainerPort)); err != nil {
				return err
			}
		}
	}
	return nil
}
