package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxProtocolFile bounds what the agent reads from the volume: request, ack
// and heartbeat are a few hundred bytes, so anything larger is not ours.
const maxProtocolFile = 64 << 10

// forbiddenRoots are directories a checkpoint (or signal) directory must not
// be in: system directories whose files the agent would create or append
// to, and the agent's own. The webhook refuses the same list in
// trainguard.io/checkpoint-path (internal/policy); agent_test.go keeps the
// two lists equal. "/lib*" covers /lib, /lib32, /lib64 and /libx32.
func forbiddenRoots() []string {
	return []string{"/etc", "/usr", "/bin", "/sbin", "/lib*", "/boot", "/opt/trainguard",
		"/proc", "/sys", "/dev", "/var/run/secrets", "/run/secrets"}
}

// checkDirAllowed refuses "/", relative paths and anything under a forbidden root.
func checkDirAllowed(what, dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%s %q must be an absolute path, e.g. /checkpoint", what, dir)
	}
	clean := filepath.Clean(dir)
	if clean == "/" {
		return fmt.Errorf("%s must not be the root directory; use e.g. /checkpoint", what)
	}
	for _, root := range forbiddenRoots() {
		if underRoot(clean, root) {
			return fmt.Errorf("%s %q is under the system directory %s; use e.g. /checkpoint", what, dir, strings.TrimSuffix(root, "*"))
		}
	}
	return nil
}

func underRoot(clean, root string) bool {
	if prefix, ok := strings.CutSuffix(root, "*"); ok {
		first := "/" + strings.SplitN(strings.TrimPrefix(clean, "/"), "/", 2)[0]
		return strings.HasPrefix(first, prefix)
	}
	return clean == root || strings.HasPrefix(clean, root+"/")
}

// openSignalDir opens the signal directory, creating it one component at a
// time below the checkpoint directory, each through its parent's descriptor
// and refused if it is a symlink or belongs to another user. The descriptor
// it returns is the only way the agent reaches the signal dir afterwards, so
// a component swapped for a symlink after the check is never followed
// (MkdirAll and later opens by path would follow it).
func openSignalDir(ckpt *dirFD, checkpointDir, signalDir string) (*dirFD, error) {
	base, clean := filepath.Clean(checkpointDir), filepath.Clean(signalDir)
	root, rel := ckpt, ""
	if r, ok := strings.CutPrefix(clean, base+"/"); ok && base != "/" {
		rel = r
	} else {
		// A signal dir outside the checkpoint dir (MIGRATION_SIGNAL_PATH): its
		// parent is the user's; the dir itself is checked like ours.
		parent := filepath.Dir(clean)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, err
		}
		p, err := openDirNoFollow(parent)
		if err != nil {
			return nil, err
		}
		defer p.close()
		root, rel = p, filepath.Base(clean)
	}
	dir := root
	for _, part := range strings.Split(rel, "/") {
		next, err := dir.subdir(part)
		if dir != root {
			dir.close()
		}
		if err != nil {
			return nil, err
		}
		dir = next
	}
	return dir, nil
}

// openAppendNoFollow opens a log-like file for appending: never through a
// symlink, never a FIFO or device, created if missing. It is opened for
// reading too, so the caller can look at the last byte.
func openAppendNoFollow(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symlink; not following it", path)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		_ = f.Close() // refused before any write; the refusal is the error
		if err == nil {
			err = fmt.Errorf("%s is not a regular file", path)
		}
		return nil, err
	}
	return f, nil
}
