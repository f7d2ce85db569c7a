// Command ocimage writes a container image as a docker-archive tarball that
// `ctr images import` loads, without a registry or a container engine:
// optional base root filesystem tarball as the first layer (streamed, never
// held in memory), then one layer with the given files, then the config.
// `make cluster` (hack/cluster/images.sh) builds every image it runs with it,
// and `make image` (hack/image.sh) trainguard's release image.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var files, env, entrypoint, cmd multi
	out := flag.String("o", "", "output tarball (docker-archive format)")
	tag := flag.String("tag", "", "image reference, e.g. localhost/trainguard:e2e")
	base := flag.String("base", "", "optional root filesystem tarball used as the first layer")
	user := flag.String("user", "", "image user, e.g. 65532:65532")
	workdir := flag.String("workdir", "", "working directory")
	arch := flag.String("arch", "amd64", "GOARCH the image's binaries are built for (the config's architecture)")
	flag.Var(&files, "file", "SRC:DST[:MODE] regular file to add (repeatable); SRC may be a directory (added recursively)")
	flag.Var(&env, "env", "KEY=VALUE (repeatable)")
	flag.Var(&entrypoint, "entrypoint", "entrypoint element (repeatable, in order)")
	flag.Var(&cmd, "cmd", "cmd element (repeatable, in order)")
	flag.Parse()
	if *out == "" || *tag == "" {
		fmt.Fprintln(os.Stderr, "ocimage: -o and -tag are required; see -help")
		os.Exit(2)
	}
	cfg := v1.Config{User: *user, WorkingDir: *workdir, Env: env, Entrypoint: entrypoint, Cmd: cmd}
	if err := build(*out, *tag, *base, *arch, files, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "ocimage:", err)
		os.Exit(1)
	}
}

func build(out, tag, base, arch string, files []string, cfg v1.Config) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag %q: %w", tag, err)
	}
	img := empty.Image
	if base != "" {
		// Opened lazily and streamed each time it is read; stored without
		// compression (gzip framing only): the image never leaves this
		// machine, and compressing a 1.3 GB root filesystem twice costs minutes.
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(base) },
			tarball.WithCompressionLevel(gzip.NoCompression))
		if err != nil {
			return fmt.Errorf("-base %s: %w", base, err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return err
		}
	}
	if len(files) > 0 {
		data, err := filesLayer(files)
		if err != nil {
			return err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		})
		if err != nil {
			return err
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			return err
		}
	}
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	img, err = mutate.Config(img, cfg)
	if err != nil {
		return err
	}
	cf, _ := img.ConfigFile()
	cf.OS, cf.Architecture = "linux", arch
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// filesLayer tars the -file arguments (small: binaries, scripts, the SDK).
func filesLayer(specs []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, spec := range specs {
		parts := strings.Split(spec, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("-file %q: want SRC:DST[:MODE]", spec)
		}
		var mode int64 = -1
		if len(parts) == 3 {
			m, err := strconv.ParseInt(parts[2], 8, 32)
			if err != nil {
				return nil, fmt.Errorf("-file %q: MODE must be octal: %w", spec, err)
			}
			mode = m
		}
		if err := addPath(tw, dirs, parts[0], strings.TrimPrefix(path.Clean(parts[1]), "/"), mode); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func addPath(tw *tar.Writer, dirs map[string]bool, src, dst string, mode int64) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("-file source: %w", err)
	}
	if err := addParents(tw, dirs, path.Dir(dst)); err != nil {
		return err
	}
	if st.IsDir() {
		if err := addDir(tw, dirs, dst); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name() == "__pycache__" {
				continue
			}
			if err := addPath(tw, dirs, src+"/"+e.Name(), dst+"/"+e.Name(), -1); err != nil {
				return err
			}
		}
		return nil
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("-file %s: not a regular file or directory", src)
	}
	if mode < 0 {
		mode = int64(st.Mode().Perm())
	}
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr := &tar.Header{Name: dst, Mode: mode, Size: st.Size(), Typeflag: tar.TypeReg, ModTime: st.ModTime()}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

func addParents(tw *tar.Writer, dirs map[string]bool, dir string) error {
	if dir == "." || dir == "/" || dir == "" || dirs[dir] {
		return nil
	}
	if err := addParents(tw, dirs, path.Dir(dir)); err != nil {
		return err
	}
	return addDir(tw, dirs, dir)
}

func addDir(tw *tar.Writer, dirs map[string]bool, dir string) error {
	if dirs[dir] {
		return nil
	}
	dirs[dir] = true
	return tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir})
}
