//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dump writes what a failure needs into one directory and returns its path:
// every Event, pod and job; the logs of trainguard, the operator,
// cert-manager and every pod in the test namespaces (current and previous
// container); and the control-plane, kubelet and containerd logs.
func (e *env) dump(ctx context.Context) string {
	dir := fmt.Sprintf("/tmp/trainguard-e2e-dump-%s", time.Now().UTC().Format("20060102-150405"))
	_ = os.MkdirAll(dir+"/pods", 0o755)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for name, args := range map[string][]string{
		"events.txt":        {"get", "events", "-A", "--sort-by=.lastTimestamp", "-o", "wide"},
		"pods.txt":          {"get", "pods", "-A", "-o", "wide"},
		"nodes.yaml":        {"get", "nodes", "-o", "yaml"},
		"pytorchjobs.yaml":  {"get", "pytorchjobs", "-A", "-o", "yaml"},
		"trainjobs.yaml":    {"get", "trainjobs,trainingruntimes,jobsets,jobs", "-A", "-o", "yaml"},
		"webhooks.yaml":     {"get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "yaml"},
		"certificates.yaml": {"get", "certificates,certificaterequests,issuers", "-A", "-o", "yaml"},
	} {
		out, _ := e.kubectl(ctx, args...)
		_ = os.WriteFile(filepath.Join(dir, name), []byte(out), 0o644)
	}
	nss, err := e.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, ns := range nss.Items {
			if !strings.HasPrefix(ns.Name, "e2e-") && ns.Name != releaseNS && ns.Name != "kubeflow" && ns.Name != "cert-manager" && ns.Name != "kubeflow-system" && ns.Name != "jobset-system" {
				continue
			}
			pods, err := e.cs.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for _, p := range pods.Items {
				for _, c := range p.Spec.Containers {
					for _, prev := range []bool{false, true} {
						args := []string{"logs", "-n", ns.Name, p.Name, "-c", c.Name, "--timestamps"}
						suffix := ""
						if prev {
							args, suffix = append(args, "--previous"), ".previous"
						}
						out, _ := e.kubectl(ctx, args...)
						_ = os.WriteFile(filepath.Join(dir, "pods", fmt.Sprintf("%s_%s_%s%s.log", ns.Name, p.Name, c.Name, suffix)), []byte(out), 0o644)
					}
				}
			}
		}
	}
	_ = exec.Command("cp", "-r", clusterDir+"/logs", dir+"/cluster-logs").Run()
	_ = exec.Command("cp", "-r", clusterDir+"/pv", dir+"/claims").Run()
	return dir
}
