package validators

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	trainerv1alpha1 "github.com/trainguard/trainguard/internal/foundations/apis/trainer/v1alpha1"
	"github.com/trainguard/trainguard/internal/jobs"
)

var expectError = regexp.MustCompile(`(?m)^# expect-error: (\S+)\s*$`)

// TestTrainerCases runs testdata/trainer (see its README): Kubeflow Trainer
// v2.0.0's own webhook and torch plugin cases, and trainguard's rules for
// the Trainer kinds. Each checked document must be refused at exactly the
// listed field paths, or admitted.
func TestTrainerCases(t *testing.T) {
	files, err := filepath.Glob("testdata/trainer/*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 20)
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			docs := trainerCaseDocs(t, file)
			v := New(nil)
			v.Runtimes = clusterOf(docs)
			for i, doc := range docs {
				var h jobs.Header
				require.NoError(t, yaml.Unmarshal(doc.yaml, &h))
				res, err := v.Validate(Object{GVK: h.GVK(), Raw: doc.json})
				require.NoError(t, err)
				var got []string
				for _, e := range res.Errors {
					got = append(got, e.Field)
				}
				assert.Equal(t, doc.want, dedupSorted(got), "document %d (%s %s): errors %v", i+1, h.Kind, h.Metadata.Name, res.Errors)
			}
		})
	}
}

type trainerCaseDoc struct {
	yaml, json []byte
	want       []string // field paths; empty means valid
}

func trainerCaseDocs(t *testing.T, file string) []trainerCaseDoc {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var out []trainerCaseDoc
	for _, part := range bytes.Split(b, []byte("\n---\n")) {
		j, err := yaml.YAMLToJSON(part)
		require.NoError(t, err)
		var want []string
		for _, m := range expectError.FindAllSubmatch(part, -1) {
			want = append(want, string(m[1]))
		}
		out = append(out, trainerCaseDoc{yaml: part, json: j, want: dedupSorted(want)})
	}
	return out
}

// clusterOf is the "cluster" of a case: the runtimes in its file, and no other.
func clusterOf(docs []trainerCaseDoc) RuntimeLookup {
	set := NewRuntimeSet()
	for _, d := range docs {
		set.Add(d.json)
	}
	return func(ns, kind, name string) (*trainerv1alpha1.TrainingRuntimeSpec, bool, error) {
		spec, _, err := set.Lookup(ns, kind, name)
		return spec, true, err
	}
}

func dedupSorted(in []string) []string {
	sort.Strings(in)
	var out []string
	for i, s := range in {
		if i == 0 || s != in[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// TestOfflineUnknownRuntimeWarns: offline, a runtime absent from the input
// may exist in the cluster, so it is a warning, never an error; the checks
// needing no runtime still apply.
func TestOfflineUnknownRuntimeWarns(t *testing.T) {
	v := New(nil)
	v.Runtimes = NewRuntimeSet().Lookup
	raw := []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"j","namespace":"a"},
"spec":{"runtimeRef":{"name":"torch-distributed"},"trainer":{"numProcPerNode":"npu"}}}`)
	res, err := v.Validate(Object{GVK: jobs.TrainJob().GVK, Raw: raw})
	require.NoError(t, err)
	require.Len(t, res.Errors, 1)
	assert.Equal(t, "spec.trainer.numProcPerNode", res.Errors[0].Field)
	assert.Contains(t, res.Errors[0].Detail, "set auto, cpu, gpu or a positive integer")
	require.Len(t, res.Warnings, 1)
	assert.Contains(t, res.Warnings[0], `ClusterTrainingRuntime "torch-distributed" is not known here`)
}

// TestTrainJobUpdateRules: runtimeRef and managedBy are immutable, and an
// old problem does not block an unrelated update.
func TestTrainJobUpdateRules(t *testing.T) {
	v := New(nil)
	old := []byte(`{"metadata":{"name":"j","namespace":"a","annotations":{"trainguard.io/gpu-limit":"lots"}},"spec":{"runtimeRef":{"name":"a"}}}`)
	moved := []byte(`{"metadata":{"name":"j","namespace":"a","annotations":{"trainguard.io/gpu-limit":"lots"}},"spec":{"runtimeRef":{"name":"b"}}}`)
	res, err := v.Validate(Object{GVK: jobs.TrainJob().GVK, Raw: moved, OldRaw: old})
	require.NoError(t, err)
	require.Len(t, res.Errors, 1, "%v", res.Errors)
	assert.Equal(t, "spec.runtimeRef", res.Errors[0].Field)
	res, err = v.Validate(Object{GVK: jobs.TrainJob().GVK, Raw: old, OldRaw: old})
	require.NoError(t, err)
	assert.Empty(t, res.Errors)
}

// TestRuntimeWithoutDisruptionRuleWarns: evictions for node faults must not
// burn the trainer Job's backoffLimit; a runtime that lets them is warned.
func TestRuntimeWithoutDisruptionRuleWarns(t *testing.T) {
	rt := func(pfp string) []byte {
		return []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainingRuntime","metadata":{"name":"r","namespace":"a"},
"spec":{"template":{"spec":{"replicatedJobs":[{"name":"node","template":{"spec":{` + pfp + `"template":{"spec":{"containers":[{"name":"node","image":"i"}]}}}}}]}}}}`)
	}
	v := New(nil) // no claim: a runtime is not injected, so it gets no durable-checkpoint warning
	res, err := v.Validate(Object{GVK: jobs.TrainingRuntime().GVK, Raw: rt("")})
	require.NoError(t, err)
	require.Len(t, res.Warnings, 1)
	assert.Contains(t, res.Warnings[0], "spec.template.spec.replicatedJobs[0].template.spec.podFailurePolicy")
	res, err = v.Validate(Object{GVK: jobs.TrainingRuntime().GVK, Raw: rt(`"podFailurePolicy":{"rules":[{"action":"Ignore","onPodConditions":[{"type":"DisruptionTarget"}]}]},`)})
	require.NoError(t, err)
	assert.Empty(t, res.Warnings)
}
