package contract

import (
	"strings"
	"testing"
)

func TestCheckpointPathDenylistCoversSystemDirectories(t *testing.T) {
	for _, p := range []string{"/", "/etc", "/etc/ckpt", "/usr/local/ckpt", "/bin", "/sbin", "/lib", "/lib64", "/lib32/x",
		"/libx32", "/boot", "/opt/trainguard", "/opt/trainguard/bin", "/proc", "/sys/fs", "/dev/shm", "/run/secrets", "/var/run/secrets/x"} {
		if _, err := ParseCheckpointPath(p); err == nil {
			t.Errorf("%s accepted as a checkpoint path", p)
		}
	}
	for _, p := range []string{"/checkpoint", "/mnt/ckpt", "/opt/ckpt", "/var/lib/ckpt", "/data/etc"} {
		if _, err := ParseCheckpointPath(p); err != nil {
			t.Errorf("%s refused: %v", p, err)
		}
	}
}

func TestCheckpointKeyIsOneSafePathComponent(t *testing.T) {
	for _, k := range []string{"..", ".", "a/b", "/abs", "../x", "A", "a_b", "", strings.Repeat("a", 64), "a.b", "-a"} {
		if _, err := ParseCheckpointKey(k); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
	for _, k := range []string{"shared", "pretrain-7", "a"} {
		if _, err := ParseCheckpointKey(k); err != nil {
			t.Errorf("key %q refused: %v", k, err)
		}
	}
}
