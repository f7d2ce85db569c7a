// Package version says which release this binary is. The release number is
// AppVersion (appversion.go), the one place it is written; the chart,
// the image tag and the Python SDK carry copies that test/install keeps
// equal to it, and hack/set-version.sh rewrites all of them at once.
package version

import (
	"runtime/debug"
	"strings"
)

// Version is the release this binary is. It is AppVersion unless a build
// overrides it with -ldflags -X (a patched build may say so), so that
// `go install ./cmd/trainguard` reports the same release as the chart and
// the image without any build flags.
var Version = AppVersion

// Commit is the source revision, stamped with -ldflags -X by `make build`
// and `make image`; empty otherwise, when the Go toolchain's own VCS stamp
// (debug.ReadBuildInfo) is used if there is one.
var Commit = ""

// String is what `trainguard version` prints: the release, then the
// commit when one is known, e.g. "0.1.0 (commit 1a2b3c4d5e6f)".
func String() string {
	commit, dirty := Commit, false
	if commit == "" {
		commit, dirty = vcsRevision()
	}
	if commit == "" {
		return Version
	}
	if len(commit) > 12 && !strings.Contains(commit, "-") {
		commit = commit[:12]
	}
	if dirty {
		commit += ", modified"
	}
	return Version + " (commit " + commit + ")"
}

// vcsRevision is the revision the go command stamped into the binary
// (builds from a git checkout without -buildvcs=false).
func vcsRevision() (revision string, modified bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", false
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return revision, modified
}
