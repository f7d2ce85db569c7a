package outcome

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

// BenchmarkPodEvent is what the reader adds to each managed pod event the
// shared cache delivers, next to a baseline the informer pays anyway (a
// DeepCopy of the same pod). Most events are running pods, which cost a
// label lookup and a loop over container statuses.
func BenchmarkPodEvent(b *testing.B) {
	line := contract.CheckpointOutcome{Outcome: contract.OutcomeSaved, Step: 1200, Bytes: 3 << 30, Seconds: 12.5}.Line()
	pod := func(state corev1.ContainerState) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "job-worker-0", UID: "u", Labels: map[string]string{contract.LabelManaged: "true"}},
			Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "pytorch", State: state}, {Name: "sidecar", State: state}}},
		}
	}
	running := pod(corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	withUser := pod(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: strings.Repeat("user log line\n", 290), FinishedAt: metav1.NewTime(time.Now())}})
	withOutcome := pod(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: "user text\n" + line, FinishedAt: metav1.NewTime(time.Now())}})
	b.Run("baseline-deepcopy", func(b *testing.B) {
		for b.Loop() {
			_ = running.DeepCopy()
		}
	})
	for name, p := range map[string]*corev1.Pod{"running": running, "terminated-4KiB-user-message": withUser, "terminated-with-outcome": withOutcome} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				_ = itemsOf(p)
			}
		})
	}
	b.Run("parse-after-4KiB-user-message", func(b *testing.B) {
		msg := strings.Repeat("user log line\n", 290) + line
		for b.Loop() {
			if _, err := contract.ParseCheckpointOutcome(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}
