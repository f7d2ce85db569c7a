package mutators

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/contract"
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
	vol := claimVolume(t.Spec, claim)
	if vol == "" {
		if existing := volumeNamed(t.Spec, contract.CheckpointVolumeName); existing != nil {
			t.Warnf("volume %q already exists and is not claim %q; checkpoint volume not injected (rename your volume or set trainguard.io/checkpoint-claim to its claim)",
				contract.CheckpointVolumeName, claim)
			return false
		}
		vol = contract.CheckpointVolumeName
		t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}})
	}
	if !mountsVolume(c, vol) {
		if other := mountAt(c, t.Policy.CheckpointPath); other != "" {
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

// claimVolume returns the name of the volume backed by claim, if any.
func claimVolume(spec *corev1.PodSpec, claim string) string {
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return v.Name
		}
	}
	return ""
}

func volumeNamed(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

func mountsVolume(c *corev1.Container, vol string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == vol {
			return true
		}
	}
	return false
}

// mountAt returns the volume mounted at path in c, if any.
func mountAt(c *corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m.Name
		}
	}
	return ""
}
