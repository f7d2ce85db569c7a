package validators

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"

	"github.com/trainguard/trainguard/internal/jobs"
)

// fuzzKinds are the kinds the fuzzer feeds every input to.
func fuzzKinds() []schema.GroupVersionKind {
	return []schema.GroupVersionKind{
		kubeflowv1.GroupVersion.WithKind("PyTorchJob"),
		{Group: "training.kubedl.io", Version: "v1alpha1", Kind: "PyTorchJob"},
		{Version: "v1", Kind: "Pod"},
		{Version: "v1", Kind: "Namespace"},
	}
}

// seedJSON returns the testdata documents as JSON, the fuzzer's seed corpus.
func seedJSON(tb testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no seed files in testdata: %v", err)
	}
	var seeds [][]byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		raw, err := yaml.YAMLToJSON(data)
		if err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		seeds = append(seeds, raw)
	}
	return append(seeds,
		object(job()).Raw,
		object(job().WithElastic(3, 1).WithWorker(0).WithNproc("x")).Raw,
		object(kubedlJob()).Raw,
		object(pod().WithPorts(taskdPort())).Raw,
	)
}

// TestSeedsAreValid keeps the seed corpus meaningful: the fuzzer starts from valid objects.
func TestSeedsAreValid(t *testing.T) {
	for _, f := range []string{"kubeflow-elastic.yaml", "kubeflow-master-worker.yaml", "kubedl-elastic.yaml", "pod.yaml", "namespace.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := yaml.YAMLToJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		var tm struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(data, &tm); err != nil {
			t.Fatal(err)
		}
		res := validate(t, Object{GVK: schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind), Raw: raw})
		if len(res.Errors) > 0 {
			t.Errorf("%s: %v", f, res.Errors)
		}
	}
}

// FuzzValidate feeds arbitrary bytes, as each kind, as a CREATE and as an
// UPDATE. Besides never panicking, Validate must be deterministic, every
// error must name a field, and an update that changes nothing must pass.
func FuzzValidate(f *testing.F) {
	for _, seed := range seedJSON(f) {
		f.Add(seed)
	}
	v := New(nil)
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, gvk := range fuzzKinds() {
			res, err := v.Validate(Object{GVK: gvk, Raw: raw})
			if err != nil {
				continue
			}
			again, _ := v.Validate(Object{GVK: gvk, Raw: raw})
			if !reflect.DeepEqual(res, again) {
				t.Fatalf("%s: not deterministic:\n%v\n%v", gvk.Kind, res, again)
			}
			for _, e := range res.Errors {
				if e == nil || e.Field == "" || e.Type == "" {
					t.Fatalf("%s: error without field or type: %#v", gvk.Kind, e)
				}
			}
			upd, err := v.Validate(Object{GVK: gvk, Raw: raw, OldRaw: raw})
			if err != nil || len(upd.Errors) > 0 {
				t.Fatalf("%s: an unchanged update was refused: %v %v", gvk.Kind, err, upd.Errors)
			}
		}
	})
}

// FuzzKubeflowElastic builds structurally valid jobs from fuzzed numbers and
// checks the validator against an independent statement of the rules: a
// job it accepts must be one the training operator can actually run.
func FuzzKubeflowElastic(f *testing.F) {
	f.Add(int32(1), int32(3), int32(2), true, "c10d", int32(29400), int32(10), false, "auto")
	f.Add(int32(3), int32(1), int32(0), false, "etcd", int32(0), int32(-1), true, "0")
	f.Add(int32(0), int32(0), int32(5), true, "etcd-v2", int32(70000), int32(3), true, "4")
	v := New(nil)
	f.Fuzz(func(t *testing.T, minR, maxR, workers int32, setMin bool, backend string, port, restarts int32, standalone bool, nproc string) {
		b := job().WithoutReplica("Master").WithWorker(workers).WithNproc(nproc).WithCheckpointVolume().
			WithPolicy(func(ep *kubeflowv1.ElasticPolicy) {
				ep.MaxReplicas, ep.RDZVBackend, ep.RDZVPort, ep.MaxRestarts, ep.Standalone = &maxR, &backend, &port, &restarts, &standalone
				if setMin {
					ep.MinReplicas = &minR
				}
			})
		res, err := v.Validate(object(b))
		if err != nil {
			t.Fatalf("decode of a typed job failed: %v", err)
		}
		if len(res.Errors) > 0 {
			for _, e := range res.Errors {
				if e.Field == "" {
					t.Fatalf("error without field: %v", e)
				}
			}
			return
		}
		lo := maxR
		if setMin {
			lo = minR
		}
		_, nprocOK := jobs.ParseNproc(nproc)
		switch {
		case lo < 1 || maxR < lo:
			t.Fatalf("accepted range [%d, %d]", lo, maxR)
		case workers < lo || workers > maxR:
			t.Fatalf("accepted %d workers outside [%d, %d]", workers, lo, maxR)
		case backend != "c10d":
			t.Fatalf("accepted backend %q (no rdzvHost)", backend)
		case port < 1 || port > 65535:
			t.Fatalf("accepted port %d", port)
		case restarts < 0:
			t.Fatalf("accepted maxRestarts %d", restarts)
		case standalone && maxR > 1:
			t.Fatalf("accepted standalone with up to %d nodes", maxR)
		case !nprocOK && nproc != "auto" && nproc != "cpu" && nproc != "gpu":
			t.Fatalf("accepted nprocPerNode %q", nproc)
		}
	})
}
