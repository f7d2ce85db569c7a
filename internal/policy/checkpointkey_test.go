package policy

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

func TestCheckpointKeyOnlyFromTheObject(t *testing.T) {
	cfg := &Config{}
	p, warnings := Resolve(cfg, map[string]string{AnnotationCheckpointKey: "ns-wide"}, nil)
	if p.CheckpointKey != "" || len(warnings) != 1 || !strings.Contains(warnings[0], "only a job or a pod") {
		t.Fatalf("namespace key applied: %q %v", p.CheckpointKey, warnings)
	}
	p, warnings = Resolve(cfg, nil, map[string]string{AnnotationCheckpointKey: "shared"})
	if p.CheckpointKey != "shared" || len(warnings) != 0 {
		t.Fatalf("object key not applied: %q %v", p.CheckpointKey, warnings)
	}
	_, warnings = Resolve(cfg, nil, map[string]string{AnnotationCheckpointKey: "../other"})
	if len(warnings) != 1 {
		t.Fatalf("bad key not warned: %v", warnings)
	}
	if errs := ValidateAnnotations(map[string]string{AnnotationCheckpointKey: "a/b"}, nil); len(errs) != 1 {
		t.Fatalf("validation accepted a/b: %v", errs)
	}
}
