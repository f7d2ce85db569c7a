package agent

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// dirFD is an open directory. Every file the agent reads, writes or renames
// on the volume is named relative to one (openat, renameat), never by path:
// a process that can write the volume could otherwise swap a component for
// a symlink between the agent's check and its use. Each directory is opened
// with O_NOFOLLOW and checked through its own descriptor (fstat), so what was
// checked is what is used.
type dirFD struct {
	fd   int
	path string // for messages only; never opened again
}

// openDirNoFollow opens path as a directory, refusing a symlink as its last
// component. The components above it are the container's own layout (the
// mount path the webhook chose), not the volume's.
func openDirNoFollow(path string) (*dirFD, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, describeOpenErr(unix.AT_FDCWD, path, path, err)
	}
	return &dirFD{fd: fd, path: path}, nil
}

func (d *dirFD) close() {
	if d != nil {
		_ = unix.Close(d.fd) // a directory opened read-only: nothing to flush
	}
}

func (d *dirFD) join(name string) string { return d.path + "/" + name }

// subdir creates (if missing) and opens the child directory name, refusing a
// symlink and a directory another user owns (checked on the opened
// descriptor, so it cannot be swapped after the check).
func (d *dirFD) subdir(name string) (*dirFD, error) {
	path := d.join(name)
	if err := unix.Mkdirat(d.fd, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, describeOpenErr(d.fd, name, path, err)
	}
	sub := &dirFD{fd: fd, path: path}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		sub.close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if int(st.Uid) != os.Geteuid() {
		sub.close()
		return nil, fmt.Errorf("%s belongs to uid %d, not to this pod's user (uid %d); refusing to use it",
			path, st.Uid, os.Geteuid())
	}
	return sub, nil
}

// describeOpenErr explains the refusals of O_NOFOLLOW|O_DIRECTORY, which
// reports a symlink as ELOOP or, with O_DIRECTORY, as ENOTDIR.
func describeOpenErr(dirfd int, name, path string, err error) error {
	var st unix.Stat_t
	isLink := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
	switch {
	case errors.Is(err, unix.ELOOP) || isLink:
		return fmt.Errorf("%s is a symlink; refusing to follow it (remove it; the agent creates the directory)", path)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s is not a directory", path)
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

// openFile opens name in d without following a symlink and without blocking
// on a FIFO planted in its place, and refuses anything but a regular file.
func (d *dirFD) openFile(name string, flags int, mode uint32) (*os.File, error) {
	path := d.join(name)
	fd, err := unix.Openat(d.fd, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, mode)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s is a symlink; not following it", path)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		_ = f.Close() // refused before any use; the refusal is the error
		if err == nil {
			err = fmt.Errorf("%s is not a regular file", path)
		}
		return nil, err
	}
	return f, nil
}

// readFile reads a small protocol file (at most maxProtocolFile bytes).
// A missing file is os.ErrNotExist, so callers can tell "not yet" from "corrupt".
func (d *dirFD) readFile(name string) ([]byte, error) {
	f, err := d.openFile(name, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxProtocolFile {
		return nil, fmt.Errorf("%s is larger than %d bytes; not a protocol file", d.join(name), maxProtocolFile)
	}
	b := make([]byte, fi.Size())
	n, err := io.ReadFull(f, b)
	if err == io.ErrUnexpectedEOF { // shrank meanwhile: what is there is all there is
		err = nil
	}
	return b[:n], err
}

// openAppend opens a log-like file in d for appending (and reading, so the
// caller can look at the last byte), created if missing.
func (d *dirFD) openAppend(name string) (*os.File, error) {
	return d.openFile(name, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT, 0o644)
}

// writeAtomic writes name in d through a temporary file in d: write, fsync,
// rename (within d), fsync d. Readers see the old content or the new one.
func (d *dirFD) writeAtomic(name string, data []byte) error {
	tmp, f, err := d.createTemp(name)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed { // best effort: the write's own error is the one returned
			_ = f.Close()
			_ = unix.Unlinkat(d.fd, tmp, 0)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", d.join(tmp), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", d.join(tmp), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", d.join(tmp), err)
	}
	if err := unix.Renameat(d.fd, tmp, d.fd, name); err != nil {
		return fmt.Errorf("rename %s to %s: %w", d.join(tmp), d.join(name), err)
	}
	committed = true
	if err := unix.Fsync(d.fd); err != nil {
		return fmt.Errorf("fsync dir %s: %w", d.path, err)
	}
	return nil
}

// createTemp creates a new file ".<name>.tmp-<n>" in d (O_EXCL: never an
// existing file or link) with mode 0644.
func (d *dirFD) createTemp(name string) (string, *os.File, error) {
	for i := 0; ; i++ {
		nonce, err := newNonce()
		if err != nil {
			return "", nil, err
		}
		tmp := "." + name + ".tmp-" + nonce[:12]
		f, err := d.openFile(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
		if err == nil {
			// The umask may have narrowed 0644; readers in other containers need it.
			if err := f.Chmod(0o644); err != nil {
				_ = f.Close()
				_ = unix.Unlinkat(d.fd, tmp, 0)
				return "", nil, fmt.Errorf("chmod %s: %w", d.join(tmp), err)
			}
			return tmp, f, nil
		}
		if !errors.Is(err, os.ErrExist) || i == 10 {
			return "", nil, fmt.Errorf("create temp file for %s: %w", d.join(name), err)
		}
	}
}
