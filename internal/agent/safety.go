package agent

import (
	"errors"
	"fmt"
	"io"
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

// ensureSignalDir creates the signal directory one component at a time
// below the checkpoint directory and refuses any component that is a
// symlink or belongs to another user: a process that may write the volume
// must not redirect the agent's writes (MkdirAll would follow a link).
func ensureSignalDir(checkpointDir, signalDir string) error {
	base, rel := filepath.Clean(checkpointDir), ""
	if r, ok := strings.CutPrefix(filepath.Clean(signalDir), base+"/"); ok && base != "/" {
		rel = r
	} else {
		// A signal dir outside the checkpoint dir (MIGRATION_SIGNAL_PATH): its
		// parent is the user's; the dir itself is checked like ours.
		base, rel = filepath.Dir(filepath.Clean(signalDir)), filepath.Base(signalDir)
		if err := os.MkdirAll(base, 0o755); err != nil {
			return err
		}
	}
	if err := checkNotSymlink(base); err != nil {
		return err
	}
	dir := base
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if err := checkOwnDir(dir); err != nil {
			return err
		}
	}
	return nil
}

func checkNotSymlink(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symlink; refusing to follow it (remove it; the agent creates the directory)", dir)
	}
	return nil
}

// checkOwnDir accepts a real directory owned by the user the agent runs as.
func checkOwnDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symlink; refusing to follow it (remove it; the agent creates the directory)", dir)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to this pod's user (uid %d); refusing to use it",
			dir, st.Uid, os.Geteuid())
	}
	return nil
}

// readNoFollow reads a small regular file without following a symlink and
// without blocking on a FIFO planted in its place.
func readNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symlink; not following it", path)
		}
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > maxProtocolFile {
		return nil, fmt.Errorf("%s is larger than %d bytes; not a protocol file", path, maxProtocolFile)
	}
	b := make([]byte, fi.Size())
	n, err := io.ReadFull(f, b)
	if err == io.ErrUnexpectedEOF { // shrank meanwhile: what is there is all there is
		err = nil
	}
	return b[:n], err
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
