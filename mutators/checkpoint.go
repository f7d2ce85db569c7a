package mutators

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
)

// Checkpoint mounts the job's directory of the policy's PVC
// (<claim>/<namespace>/<key>/, see checkpointKey) into the training
// container and sets the env that tells the trainer where checkpoints live.
func Checkpoint(t *Target) bool {
	claim := t.Policy.CheckpointClaim
	c := t.TrainingContainer()
	if claim == "" || c == nil {
		return false
	}
	vol := podspec.ClaimVolume(t.Spec, claim)
	if vol == "" {
		if existing := podspec.VolumeNamed(t.Spec, contract.CheckpointVolumeName); existing != nil {
			t.Warnf("volume %q already exists and is not claim %q; checkpoint volume not injected (rename your volume or set trainguard.io/checkpoint-claim to its claim)",
				contract.CheckpointVolumeName, claim)
			return false
		}
		vol = contract.CheckpointVolumeName
		t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}})
	}
	if !podspec.MountsVolume(c, vol) {
		if other := podspec.MountAt(c, t.Policy.CheckpointPath); other != "" {
			t.Warnf("container %q already mounts volume %q at %s; checkpoint volume not mounted (set trainguard.io/checkpoint-path to a free path)",
				c.Name, other, t.Policy.CheckpointPath)
			return false
		}
		// Only the job's own directory: another job's files are not even visible.
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: t.Policy.CheckpointPath, SubPathExpr: jobSubPath})
	}
	ensureCheckpointEnv(t, c)
	return true
}
