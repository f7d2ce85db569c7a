package install

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/foundations/version"
)

// archiveManifest is one entry of a docker-archive's manifest.json, the
// file `docker load`, `ctr images import` and `kind load image-archive` read.
type archiveManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// imageConfig is the part of the image config the loaders and the kubelet use.
type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Entrypoint []string
		User       string
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// TestMakeImageWritesALoadableArchive runs `make image` into a temporary
// file and reads the archive as a loader does: every blob's digest is
// checked (config by its name, layers by diff_id), the tag is the chart's
// default image, and the /trainguard it holds runs and names the release.
// (`make image-check` additionally imports it with containerd's ctr, which
// needs root.)
func TestMakeImageWritesALoadableArchive(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "trainguard.tar")
	cmd := exec.Command("make", "--no-print-directory", "image", "IMAGE_ARCHIVE="+archive)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make image: %s", out)
	st, err := os.Stat(archive)
	require.NoError(t, err)
	t.Logf("make image: %s, %.1f MB", archive, float64(st.Size())/(1<<20))

	files := readTar(t, archive)
	var manifests []archiveManifest
	require.NoError(t, json.Unmarshal(files["manifest.json"], &manifests))
	require.Len(t, manifests, 1)
	m := manifests[0]
	assert.Equal(t, []string{version.Image}, m.RepoTags, "tagged as the image the chart deploys, so helm install needs no --set")

	cfgBlob, ok := files[m.Config]
	require.True(t, ok, "config %s missing from the archive", m.Config)
	assert.Equal(t, "sha256:"+sha(cfgBlob), "sha256:"+strings.TrimSuffix(strings.TrimPrefix(filepath.Base(m.Config), "sha256:"), ".json"),
		"the config blob matches its digest")
	var cfg imageConfig
	require.NoError(t, json.Unmarshal(cfgBlob, &cfg))
	assert.Equal(t, "linux", cfg.OS)
	assert.NotEmpty(t, cfg.Architecture)
	assert.Equal(t, []string{"/trainguard"}, cfg.Config.Entrypoint, "the chart runs /trainguard serve")
	assert.Equal(t, "65532:65532", cfg.Config.User, "numeric, so runAsNonRoot can verify it")
	assert.Equal(t, "layers", cfg.RootFS.Type)
	require.Len(t, cfg.RootFS.DiffIDs, len(m.Layers))

	rootfs := map[string]*tar.Header{}
	var binary []byte
	for i, name := range m.Layers {
		blob, ok := files[name]
		require.True(t, ok, "layer %s missing from the archive", name)
		layer := uncompress(t, blob)
		assert.Equal(t, cfg.RootFS.DiffIDs[i], "sha256:"+sha(layer), "layer %d matches its diff_id", i)
		for hdr, data := range tarEntries(t, layer) {
			rootfs[hdr.Name] = hdr
			if hdr.Name == "trainguard" {
				binary = data
			}
		}
	}
	for _, exe := range []string{"trainguard", "trainguard-agent"} {
		require.Contains(t, rootfs, exe, "the image holds /%s (the agent is copied into training pods from it)", exe)
		assert.Equal(t, int64(0o755), rootfs[exe].Mode&0o777, "/%s is executable", exe)
	}

	// The binary in the image reports the release the chart and tag name.
	bin := filepath.Join(t.TempDir(), "trainguard")
	require.NoError(t, os.WriteFile(bin, binary, 0o755))
	out, err = exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.True(t, strings.HasPrefix(strings.TrimSpace(string(out)), version.AppVersion), "/trainguard version in the image: %s", out)
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// readTar returns every regular file of a tar archive by name.
func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	files := map[string][]byte{}
	for hdr, data := range tarEntriesFrom(t, bufio.NewReader(f)) {
		files[hdr.Name] = data
	}
	return files
}

// uncompress returns a layer blob uncompressed (layers may be gzip'd or not).
func uncompress(t *testing.T, blob []byte) []byte {
	t.Helper()
	if !bytes.HasPrefix(blob, []byte{0x1f, 0x8b}) {
		return blob
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob))
	require.NoError(t, err)
	data, err := io.ReadAll(zr)
	require.NoError(t, err)
	return data
}

func tarEntries(t *testing.T, data []byte) map[*tar.Header][]byte {
	return tarEntriesFrom(t, bytes.NewReader(data))
}

func tarEntriesFrom(t *testing.T, r io.Reader) map[*tar.Header][]byte {
	t.Helper()
	out := map[*tar.Header][]byte{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, "reading the archive")
		if hdr.Typeflag != tar.TypeReg {
			out[hdr] = nil
			continue
		}
		data, err := io.ReadAll(tr)
		require.NoError(t, err, fmt.Sprintf("reading %s", hdr.Name))
		out[hdr] = data
	}
}
