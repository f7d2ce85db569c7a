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

// architecture is the layering, bottom up. Reading the rows is reading the
// rules: foundations, the job kinds, the configuration and the policy reach
// nothing above them; no controller reaches the injections, the rules or
// the admission server; the admission server reaches no controller.
func architecture() []layer {
	return []layer{
		{name: "foundations", packages: []string{"internal/foundations/..."}},
		{name: "jobs", packages: []string{"internal/jobs"}, reaches: []string{"foundations"}},
		{name: "config", packages: []string{"internal/config/..."}, reaches: []string{"foundations", "jobs"}},
		{name: "policy", packages: []string{"internal/policy"}, reaches: []string{"foundations", "jobs", "config"}},
		{name: "injections", packages: []string{"mutators"}, reaches: []string{"foundations", "jobs", "config", "policy"}},
		{name: "rules", packages: []string{"validators"}, reaches: []string{"foundations", "jobs", "config", "policy"}},
		{name: "controllers", packages: []string{"internal/controllers/..."}, reaches: []string{"foundations", "jobs", "config", "policy"}},
		{name: "admission", packages: []string{"webhook"}, reaches: []string{"foundations", "jobs", "config", "policy", "injections", "rules"}},
		// Certificates stand alone: the process wires them in.
		{name: "certs", packages: []string{"certs"}},
		{name: "process", packages: []string{"internal/server", "cmd/trainguard"},
			reaches: []string{"foundations", "jobs", "config", "policy", "injections", "rules", "controllers", "admission", "certs"}},
		// The in-pod agent ships in its own binary and needs nothing of the rest.
		{name: "agent", packages: []string{"internal/agent", "cmd/trainguard-agent"}},
		{name: "test support", packages: []string{"internal/testing/..."}, reaches: []string{"foundations"}},
		// Suites and tools may use anything; nothing product reaches them.
		{name: "tests and tools", packages: []string{"test/...", "hack/..."},
			reaches: []string{"foundations", "jobs", "config", "policy", "injections", "rules", "controllers", "admission", "certs", "process", "agent", "test support"}},
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

// layerOf returns the layer of a module package; ok is false outside the
// module or for a package no layer names.
func layerOf(layers []layer, importPath string) (layer, bool) {
	path, inModule := strings.CutPrefix(importPath, module+"/")
	if !inModule {
		return layer{}, false
	}
	for _, l := range layers {
		for _, p := range l.packages {
			if tree, ok := strings.CutSuffix(p, "/..."); ok && (path == tree || strings.HasPrefix(path, tree+"/")) || path == p {
				return l, true
			}
		}
	}
	return layer{}, false
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
