package mutators

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/podspec"
	"github.com/trainguard/trainguard/internal/jobs"
)

// jobSubPath is the job's directory relative to the claim's root, expanded
// by the kubelet from the env ensureCheckpointEnv adds.
const jobSubPath = "$(" + contract.EnvNamespace + ")/$(" + contract.EnvCheckpointKey + ")"

// defaultTerminationMessagePath is the kubelet's default terminationMessagePath.
const defaultTerminationMessagePath = "/dev/termination-log"

// checkpointDir is where the trainer finds this job's checkpoints. When
// trainguard mounts the claim it mounts only the job's directory
// (subPathExpr), so the mount path is the job's directory. When the
// container already mounts the claim at its root (the user's layout wins),
// or trainguard does not mount it, the job's directory is spelled out below
// that path and the SDK creates it.
func checkpointDir(t *Target, c *corev1.Container) string {
	if t.Policy.CheckpointClaim != "" {
		if vol := podspec.ClaimVolume(t.Spec, t.Policy.CheckpointClaim); vol != "" {
			for _, m := range c.VolumeMounts {
				if m.Name == vol && m.SubPathExpr == jobSubPath {
					return m.MountPath
				}
				if m.Name == vol {
					return strings.TrimSuffix(m.MountPath, "/") + "/" + jobSubPath
				}
			}
		}
		if t.Policy.Enabled(contract.InjectionCheckpoint) {
			return t.Policy.CheckpointPath // Checkpoint mounts the job's directory there
		}
	}
	return strings.TrimSuffix(t.Policy.CheckpointPath, "/") + "/" + jobSubPath
}

// ensureCheckpointEnv adds the env the agent and the SDK read. Variables the
// user already set are kept. Order matters: a value may only reference
// ($(NAME)) variables defined before it.
func ensureCheckpointEnv(t *Target, c *corev1.Container) {
	dir := checkpointDir(t, c)
	signal := dir + "/.trainguard/$(" + contract.EnvPodName + ")"
	ensureEnv(c, fieldEnv(contract.EnvPodName, "metadata.name"))
	ensureEnv(c, fieldEnv(contract.EnvNamespace, "metadata.namespace"))
	ensureEnv(c, fieldEnv(contract.EnvPodUID, "metadata.uid"))
	key := checkpointKey(t)
	for _, l := range t.JobNameLabels {
		if strings.Contains(key, "$("+l.Env+")") {
			path := l.FieldPath
			if path == "" {
				path = jobs.NameLabel(l.Env, l.Label).FieldPath
			}
			ensureEnv(c, fieldEnv(l.Env, path))
		}
	}
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvCheckpointKey, Value: key})
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvCheckpointDir, Value: dir})
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvSignalDir, Value: signal})
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvPreStopTimeout, Value: contract.FormatDuration(t.Policy.PreStopTimeout)})
	if t.Policy.CheckpointInterval > 0 { // the container's own value, if any, is kept
		ensureEnv(c, corev1.EnvVar{Name: contract.EnvCheckpointEvery, Value: contract.FormatDuration(t.Policy.CheckpointInterval)})
	}
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvMigrationCkptPath, Value: dir})
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvMigrationSignalPath, Value: signal})
	tmp := c.TerminationMessagePath
	if tmp == "" {
		tmp = defaultTerminationMessagePath
	}
	ensureEnv(c, corev1.EnvVar{Name: contract.EnvTerminationMessagePath, Value: tmp})
}

// checkpointKey names the job's directory below <claim>/<namespace>/, in
// this order: the object's own trainguard.io/checkpoint-key (validated by
// the policy), "<kind>.<group>/<name>" for a job's pod template (e.g.
// "pytorchjob.kubeflow.org/train"; the name comes from the operator's
// labels on each pod, which the kind's adapter names (jobs.Adapter.JobNameLabels), so a
// job created with generateName works too; a kind that names none gets the
// pod's name, so no two jobs ever share a directory), "<owner
// kind>/<owner name>" for a pod another controller owns,
// and "pod/<pod name>" for a bare pod (the kubelet expands the name, so a
// generateName pod gets its final name). Every literal part is validated here
// to be one safe path component; label values cannot hold '/' and cannot be
// ".." (the API server's label syntax), and the kubelet refuses a subPathExpr
// that expands to an absolute path or one with "..".
func checkpointKey(t *Target) string {
	// Most jobs set no key: the empty one is invalid without building the
	// validation's error messages, several times per pod.
	if k := t.Policy.CheckpointKey; k != "" {
		if _, err := contract.ParseCheckpointKey(k); err == nil {
			return "key/" + k
		}
	}
	if t.Policy.JobDirectory != "" {
		return t.Policy.JobDirectory
	}
	if t.Where != "" {
		return templateKey(templateKeyPrefix(t.Kind), t.JobNameLabels)
	}
	for _, ref := range t.Meta.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		kind := strings.ToLower(ref.Kind)
		if contract.IsPathComponentSafe(kind) && contract.IsPathComponentSafe(ref.Name) {
			return kind + "/" + ref.Name
		}
		t.Warnf("owner %s %q cannot name a directory; the checkpoint directory is named after the pod instead", ref.Kind, ref.Name)
	}
	return "pod/$(" + contract.EnvPodName + ")"
}

// templateKey is prefix/$(ENV)… for the job-name labels, or the pod's name
// when the kind names none (built in one allocation: it runs per template).
func templateKey(prefix string, labels []jobs.JobNameLabel) string {
	if len(labels) == 0 {
		return prefix + "/$(" + contract.EnvPodName + ")"
	}
	n := len(prefix)
	for _, l := range labels {
		n += len(l.Env) + len("/$()")
	}
	var key strings.Builder
	key.Grow(n)
	key.WriteString(prefix)
	for _, l := range labels {
		key.WriteString("/$(")
		key.WriteString(l.Env)
		key.WriteString(")")
	}
	return key.String()
}

// templateKeyPrefix is the literal first component of a job template's key:
// the kind qualified by its group, "pytorchjob.kubeflow.org" or
// "pytorchjob.training.kubedl.io". A kubeflow and a KubeDL PyTorchJob of
// the same name therefore get different directories (and identities, which
// the SDK derives from the key). The dot keeps it apart from every other
// prefix: "pod", "key", "trainjob" and an owner's lowercased kind, which
// cannot contain a dot (a kind is a DNS-1035 label).
func templateKeyPrefix(gk schema.GroupKind) string {
	prefix := strings.ToLower(gk.Kind)
	if gk.Group != "" {
		prefix += "." + gk.Group
	}
	return prefix
}

func fieldEnv(name, fieldPath string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath},
	}}
}

func ensureEnv(c *corev1.Container, v corev1.EnvVar) {
	for _, e := range c.Env {
		if e.Name == v.Name {
			return
		}
	}
	c.Env = append(c.Env, v)
}
