package mutators

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/trainguard/trainguard/internal/contract"
)

// checkpointDir is where the trainer finds checkpoints: the mount path of
// the policy's claim if the training container already mounts it (the user's
// layout wins), else the policy's path.
func checkpointDir(t *Target, c *corev1.Container) string {
	if t.Policy.CheckpointClaim != "" {
		if vol := claimVolume(t.Spec, t.Policy.CheckpointClaim); vol != "" {
			for _, m := range c.VolumeMounts {
				if m.Name == vol {
					return m.MountPath
				}
			}
		}
	}
	return t.Policy.CheckpointPath
}

// ensureCheckpointEnv adds the env the agent and the SDK read. Variables the
// user already set are kept. TRAINGUARD_POD_NAME comes first so the signal
// dir can reference it with $(...) expansion.
func ensureCheckpointEnv(t *Target, c *corev1.Container) {
	dir := checkpointDir(t, c)
	signal := dir + "/.trainguard/$(" + contract.EnvPodName + ")"
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvPodName, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"},
	}})
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvCheckpointDir, Value: dir})
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvSignalDir, Value: signal})
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvPreStopTimeout, Value: contract.FormatDuration(t.Policy.PreStopTimeout)})
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvMigrationCkptPath, Value: dir})
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvMigrationSignalPath, Value: signal})
}

func ensureEnv(c *corev1.Container, v corev1.EnvVar) {
	for _, e := range c.Env {
		if e.Name == v.Name {
			return
		}
	}
	c.Env = append(c.Env, v)
}
