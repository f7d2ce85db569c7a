// Package podspec holds the pod-spec helpers every injection, the
// validators and the rescheduler share: finding volumes, mounts and
// containers, and the node anti-affinity that keeps a pod off bad nodes.
// It knows no trainguard policy, so every layer above may use it.
package podspec

import corev1 "k8s.io/api/core/v1"

// VolumeNamed returns the pod's volume named name, or nil.
func VolumeNamed(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// ClaimVolume returns the name of the volume backed by claim, if any.
func ClaimVolume(spec *corev1.PodSpec, claim string) string {
	for _, v := range spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return v.Name
		}
	}
	return ""
}

// MountsVolume reports whether c mounts the volume vol.
func MountsVolume(c *corev1.Container, vol string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == vol {
			return true
		}
	}
	return false
}

// MountAt returns the volume mounted at path in c, if any.
func MountAt(c *corev1.Container, path string) string {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return m.Name
		}
	}
	return ""
}

// HasContainer reports whether spec has a container named name.
func HasContainer(spec *corev1.PodSpec, name string) bool {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return true
		}
	}
	return false
}
