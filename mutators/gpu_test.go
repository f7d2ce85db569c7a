package mutators

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// TestGPUDefaultOnlyWhereAnAcceleratorIsMeant: a training container that
// asks for no accelerator gets the default only when its pod shows it
// wants one, or the policy asks for every job (gpu.defaultFor: AllJobs or
// an explicit trainguard.io/gpu-limit).
func TestGPUDefaultOnlyWhereAnAcceleratorIsMeant(t *testing.T) {
	cases := []struct {
		name   string
		spec   func(*corev1.PodSpec)
		forAll bool
		want   bool
	}{
		{"CPU job, no backend named", func(*corev1.PodSpec) {}, false, false},
		{"gloo backend", func(s *corev1.PodSpec) { s.Containers[0].Args = []string{"--backend", "gloo"} }, false, false},
		{"gloo, but the policy asks for every job", func(s *corev1.PodSpec) { s.Containers[0].Args = []string{"--backend", "gloo"} }, true, true},
		{"NCCL backend in args", func(s *corev1.PodSpec) { s.Containers[0].Args = []string{"--backend=nccl"} }, false, true},
		{"NCCL env", func(s *corev1.PodSpec) { s.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}} }, false, true},
		{"torchrun --nproc-per-node=gpu", func(s *corev1.PodSpec) {
			s.Containers[0].Command = []string{"torchrun", "--nproc-per-node=gpu", "train.py"}
		}, false, true},
		{"another container asks for a GPU", func(s *corev1.PodSpec) {
			s.Containers = append(s.Containers, corev1.Container{Name: "side", Resources: corev1.ResourceRequirements{Limits: gpu("1")}})
		}, false, true},
		{"another vendor's accelerator", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "warm", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"amd.com/gpu": gpu("1")["nvidia.com/gpu"]}}}}
		}, false, true},
		{"tolerates GPU nodes", func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
		}, false, true},
		{"selects GPU nodes", func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{"cloud.google.com/gke-accelerator": "nvidia-l4"}
		}, false, true},
		{"unrelated extended resource", func(s *corev1.PodSpec) {
			s.Containers[0].Resources.Limits = corev1.ResourceList{"rdma/hca": gpu("1")["nvidia.com/gpu"]}
		}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget("pytorch").with(tc.spec).policy(func(p *contract.Policy) { p.GPUForAll = tc.forAll }).build()
			assert.Equal(t, tc.want, GPU(tg))
			_, has := tg.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]
			assert.Equal(t, tc.want, has)
		})
	}
}

// lowered is how the signs were looked for before acceleratorWord: lower
// a joined copy, then search it.
func lowered(w string) bool {
	w = strings.ToLower(w)
	return strings.Contains(w, "nccl") || strings.Contains(w, "nproc_per_node=gpu") || strings.Contains(w, "nproc-per-node=gpu")
}

// FuzzAcceleratorSignsAsLowering: the allocation-free search finds a sign
// exactly where lowering the joined words did.
func FuzzAcceleratorSignsAsLowering(f *testing.F) {
	f.Add("PET_NPROC_PER_NODE", "gpu")
	f.Add("NCCL_DEBUG", "INFO")
	f.Add("X", "--nproc-per-node=GPU")
	f.Add("A_NPROC_PER_NODE", "GPU=1")
	f.Add("\u212a", "nCcL")
	f.Fuzz(func(t *testing.T, name, value string) {
		if strings.Contains(name, "=") {
			return // not an env name
		}
		if got, want := acceleratorEnv(name, value), lowered(name+"="+value); got != want {
			t.Fatalf("env %q=%q: %v, lowering says %v", name, value, got, want)
		}
		if got, want := acceleratorWord(value), lowered(value); got != want {
			t.Fatalf("word %q: %v, lowering says %v", value, got, want)
		}
	})
}
