package validators

import (
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trainguard/trainguard/internal/jobs"
)

// FuzzValidateTrainer feeds arbitrary bytes as each Trainer v2 kind, with a
// runtime lookup over the seeds' runtimes: never a panic, deterministic,
// every error names a field, and an unchanged update passes.
func FuzzValidateTrainer(f *testing.F) {
	files, err := filepath.Glob("testdata/trainer/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	set := NewRuntimeSet()
	for _, file := range files {
		for _, d := range trainerCaseDocs(&testing.T{}, file) {
			f.Add(d.json)
			set.Add(d.json)
		}
	}
	v := New(nil)
	v.Runtimes = set.Lookup
	kinds := []schema.GroupVersionKind{jobs.TrainJob().GVK, jobs.TrainingRuntime().GVK, jobs.ClusterTrainingRuntime().GVK}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, gvk := range kinds {
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
			if upd, err := v.Validate(Object{GVK: gvk, Raw: raw, OldRaw: raw}); err != nil || len(upd.Errors) > 0 {
				t.Fatalf("%s: an unchanged update was refused: %v %v", gvk.Kind, err, upd.Errors)
			}
		}
	})
}
