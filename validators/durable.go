package validators

import (
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/jobs"
)

// ephemeralCheckpointWarning starts every message about checkpoints that
// die with their pod. Callers recognise them by Result.EphemeralCheckpoints,
// never by this text: a message also quotes what the tenant wrote.
const ephemeralCheckpointWarning = "checkpoints are not durable"

// durableCheckpoints checks, for every pod template (or pod) of an object
// trainguard injects, that the training container's checkpoint directory
// survives the pod: a preStop checkpoint written to the container's own
// filesystem or an emptyDir is deleted with the pod, and the replacement
// that should load it starts from scratch. It is a warning, or an error
// where the namespace (or the config) requires durable checkpoints.
func durableCheckpoints(p *contract.Policy, a *jobs.Adapter, job jobs.Job) (field.ErrorList, []string, []EphemeralCheckpoint) {
	if a.NotMutated != nil && a.NotMutated(job) != "" {
		// A Trainer runtime or TrainJob is not injected itself: its pods
		// are, in their own namespaces, and are checked there.
		return nil, nil, nil
	}
	var errs field.ErrorList
	var warnings []string
	var found []EphemeralCheckpoint
	for _, tpl := range job.Templates() {
		i := contract.TrainingContainer(tpl.Spec, p.TrainingContainers)
		if i < 0 {
			continue
		}
		where := ephemeralCheckpoint(p, tpl.Spec, &tpl.Spec.Containers[i])
		if where == "" {
			continue
		}
		cPath := tpl.SpecPath().Child("containers").Index(i)
		msg := fmt.Sprintf("%s: %s is on %s, which is deleted with the pod: a preStop or periodic checkpoint saves nothing a replacement pod can load; "+
			"set %s on the namespace (or checkpoint.claim in the configuration) to a ReadWriteMany PersistentVolumeClaim",
			ephemeralCheckpointWarning, p.CheckpointPath, where, contract.AnnotationCheckpointClaim)
		found = append(found, EphemeralCheckpoint{Container: cPath, Refused: p.RequireDurableCheckpoints})
		if p.RequireDurableCheckpoints {
			errs = append(errs, field.Forbidden(cPath.Child("volumeMounts"), msg+
				fmt.Sprintf(" (required here by %s=true or checkpoint.requireDurable)", contract.AnnotationRequireDurableCheckpoints)))
			continue
		}
		warnings = append(warnings, cPath.String()+": "+msg)
	}
	return errs, warnings, found
}

// ephemeralCheckpoint says where the checkpoint directory of c would live
// when that place dies with the pod ("" when it is durable): the mount
// at or above the checkpoint path decides; without one, the claim the
// checkpoint-volume injection will mount there.
func ephemeralCheckpoint(p *contract.Policy, spec *corev1.PodSpec, c *corev1.Container) string {
	if m := mountHolding(c, p.CheckpointPath); m != nil {
		v := volumeByName(spec, m.Name)
		if v == nil || durableVolume(v) {
			return "" // an undeclared volume is refused elsewhere
		}
		return fmt.Sprintf("volume %q (%s)", v.Name, volumeType(v))
	}
	if p.CheckpointClaim != "" && p.Enabled(contract.InjectionCheckpoint) {
		return ""
	}
	return "the container's own filesystem"
}

// mountHolding returns the mount of c that contains dir, the deepest first.
func mountHolding(c *corev1.Container, dir string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		mp := path.Clean(m.MountPath)
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && (best == nil || len(mp) > len(best.MountPath)) {
			best = m
		}
	}
	return best
}

func volumeByName(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// durableVolume: a volume whose data outlives the pod and can be mounted by
// its replacement on another node. A hostPath outlives the pod but stays on
// its node, which is exactly what a rescheduled pod leaves behind.
func durableVolume(v *corev1.Volume) bool {
	s := v.VolumeSource
	return s.PersistentVolumeClaim != nil || s.NFS != nil || s.CephFS != nil || s.Glusterfs != nil || s.ISCSI != nil ||
		s.RBD != nil || s.AzureFile != nil || s.FC != nil || s.Quobyte != nil || s.PortworxVolume != nil
}

func volumeType(v *corev1.Volume) string {
	s := v.VolumeSource
	switch {
	case s.EmptyDir != nil:
		return "emptyDir"
	case s.Ephemeral != nil:
		return "a generic ephemeral volume"
	case s.HostPath != nil:
		return "hostPath, which stays on the node"
	case s.CSI != nil:
		return "an inline CSI volume"
	}
	return "not persistent"
}

// EphemeralCounts counts the pod templates (or pods) of r warned about
// and refused for checkpoints that die with the pod.
func (r Result) EphemeralCounts() (warned, refused int) {
	for _, e := range r.EphemeralCheckpoints {
		if e.Refused {
			refused++
		} else {
			warned++
		}
	}
	return warned, refused
}
