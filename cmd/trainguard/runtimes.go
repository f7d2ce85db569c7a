package main

import (
	"encoding/json"

	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/validators"
)

// runtimesIn collects the Trainer runtimes among docs (and List items), so
// that `trainguard validate` checks each TrainJob against its runtime when
// the runtime is in the same input.
func runtimesIn(docs [][]byte) *validators.RuntimeSet {
	set := validators.NewRuntimeSet()
	for _, doc := range docs {
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			continue
		}
		var h jobs.Header
		if json.Unmarshal(raw, &h) != nil {
			continue
		}
		if !h.IsList() {
			set.Add(raw)
			continue
		}
		items, err := jobs.ListItems(raw)
		if err != nil {
			continue
		}
		for _, item := range items {
			set.Add(item)
		}
	}
	return set
}
