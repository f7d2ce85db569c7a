// Package layers holds trainguard's package layering (DEVELOPERS.md,
// "Layers") over everything each package reaches, not only what it imports:
// `go list` gives every package's transitive dependencies, so an import that
// drags a higher layer in through a lower one (the configuration importing
// the injection registry, and with it every controller) fails as surely as
// a direct one.
package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/trainguard/trainguard/internal/testing/repo"
)

const module = "github.com/trainguard/trainguard"

// layer is a set of packages (paths inside the module; "x/..." is x and
// everything under it) and the layers its packages may reach. A package
// always reaches its own layer.
type layer struct {
	name     string
	packages []string
	reaches  []string
}

// controllers are the controllers, each a layer of its own: siblings never
// reach each other, so what two of them share lives below them (the job
// key in jobs, the outcome line in contract, the owner chains in
// controller support) and each can be read, tested and wired alone.
func controllers() []string {
	return []string{"rescheduler", "outcome", "boost", "optin", "warning"}
}

// architecture is the layering, bottom up. Reading the rows is reading the
// rules: foundations, the job kinds, the configuration and the policy reach
// nothing above them; the configuration file's loader and the schema
// checks it shares with `trainguard validate` stay out of the webhook and
// the controllers; no controller reaches another, the injections, the
// rules or the admission server; the admission server reaches no controller.
func architecture() []layer {
	base := []string{"foundations", "jobs", "configuration", "policy"}
	out := []layer{
		{name: "foundations", packages: []string{"internal/foundations/..."}},
		// Checking a document against a Go type, as the API server's
		// schema does: for files and offline input, never online.
		{name: "schema checks", packages: []string{"internal/foundations/typecheck", "internal/foundations/crdfields"}, reaches: []string{"foundations"}},
		{name: "jobs", packages: []string{"internal/jobs"}, reaches: []string{"foundations"}},
		{name: "configuration", packages: []string{"internal/config/v1alpha1"}, reaches: []string{"foundations", "jobs"}},
		{name: "configuration file", packages: []string{"internal/config"}, reaches: []string{"foundations", "schema checks", "jobs", "configuration"}},
		{name: "policy", packages: []string{"internal/policy"}, reaches: []string{"foundations", "jobs", "configuration"}},
		{name: "injections", packages: []string{"mutators"}, reaches: base},
		{name: "rules", packages: []string{"validators"}, reaches: base},
		{name: "controller support", packages: []string{"internal/controllers/ownerchain"}, reaches: []string{"foundations", "jobs"}},
	}
	for _, c := range controllers() {
		out = append(out, layer{name: "controller " + c, packages: []string{"internal/controllers/" + c}, reaches: append(slices.Clone(base), "controller support")})
	}
	every := []string{"foundations", "schema checks", "jobs", "configuration", "configuration file", "policy", "injections", "rules", "controller support"}
	for _, c := range controllers() {
		every = append(every, "controller "+c)
	}
	return append(out,
		layer{name: "admission", packages: []string{"webhook"}, reaches: append(slices.Clone(base), "injections", "rules")},
		// Certificates stand alone: the process wires them in.
		layer{name: "certs", packages: []string{"certs"}},
		layer{name: "process", packages: []string{"internal/server", "cmd/trainguard"}, reaches: append(slices.Clone(every), "admission", "certs")},
		// The in-pod agent ships in its own binary and needs nothing of the rest.
		layer{name: "agent", packages: []string{"internal/agent", "cmd/trainguard-agent"}},
		layer{name: "test support", packages: []string{"internal/testing/..."}, reaches: []string{"foundations"}},
		// Suites and tools may use anything; nothing product reaches them.
		layer{name: "tests and tools", packages: []string{"test/...", "hack/..."},
			reaches: append(slices.Clone(every), "admission", "certs", "process", "agent", "test support")},
	)
}

// TestEveryControllerIsALayer: a package under internal/controllers is a
// controller of its own layer unless it is named as controller support, so
// a new controller cannot join a sibling's layer unnoticed.
func TestEveryControllerIsALayer(t *testing.T) {
	pkgs := modulePackages(t)
	for path := range pkgs {
		dir, ok := strings.CutPrefix(rel(path), "internal/controllers/")
		if !ok {
			continue
		}
		l, placed := layerOf(architecture(), path)
		assert.True(t, placed && (l.name == "controller "+dir || l.name == "controller support"),
			"%s: add it to controllers() in test/layers (or to controller support when it is shared, not a controller)", rel(path))
	}
}

func TestEveryPackageReachesOnlyTheLayersBelowIt(t *testing.T) {
	pkgs := modulePackages(t)
	layers := architecture()
	byName := map[string]layer{}
	for _, l := range layers {
		byName[l.name] = l
	}
	for _, l := range layers {
		for _, r := range l.reaches {
			require.Contains(t, byName, r, "layer %s reaches unknown layer %s", l.name, r)
		}
	}
	for _, path := range slices.Sorted(maps.Keys(pkgs)) {
		p := pkgs[path]
		from, ok := layerOf(layers, p.ImportPath)
		if !assert.True(t, ok, "%s is in no layer: add it to architecture() in test/layers and to DEVELOPERS.md", p.ImportPath) {
			continue
		}
		for _, dep := range p.Deps {
			to, ok := layerOf(layers, dep)
			if !ok || to.name == from.name || slices.Contains(from.reaches, to.name) {
				// Outside the module, or an unplaced package (reported above).
				continue
			}
			assert.Fail(t, "upward dependency",
				"%s (%s) reaches %s (%s) through %s; %s may reach only %v",
				rel(p.ImportPath), from.name, rel(dep), to.name, strings.Join(importChain(pkgs, p.ImportPath, dep), " -> "), from.name, from.reaches)
		}
	}
}

// pkg is what `go list` says about one package of the module.
type pkg struct {
	ImportPath string
	Imports    []string
	// Deps are all the packages it reaches, directly or not (not its tests').
	Deps []string
}

// modulePackages lists the module's packages with their dependencies.
func modulePackages(t *testing.T) map[string]pkg {
	t.Helper()
	root, err := repo.Root()
	require.NoError(t, err)
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = root
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		pkgs[p.ImportPath] = p
	}
	require.Contains(t, pkgs, module+"/webhook", "go list listed no trainguard packages")
	return pkgs
}

// layerOf returns the layer of a module package: the one naming it most
// precisely (a package named exactly, then the longest "x/..." holding
// it); ok is false outside the module or for a package no layer names.
func layerOf(layers []layer, importPath string) (layer, bool) {
	path, inModule := strings.CutPrefix(importPath, module+"/")
	if !inModule {
		return layer{}, false
	}
	var best layer
	bestLen := -1
	for _, l := range layers {
		for _, p := range l.packages {
			n := -1
			if path == p {
				n = len(p) + 1 // exact beats any tree
			} else if tree, ok := strings.CutSuffix(p, "/..."); ok && (path == tree || strings.HasPrefix(path, tree+"/")) {
				n = len(tree)
			}
			if n > bestLen {
				best, bestLen = l, n
			}
		}
	}
	return best, bestLen >= 0
}

// importChain is a shortest chain of direct imports from one module
// package to another, so the failure names the import to remove.
func importChain(pkgs map[string]pkg, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var chain []string
			for p := to; p != ""; p = prev[p] {
				chain = append([]string{rel(p)}, chain...)
			}
			return chain
		}
		for _, imp := range pkgs[cur].Imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return []string{rel(from), "?", rel(to)}
}

func rel(importPath string) string { return strings.TrimPrefix(importPath, module+"/") }
