package jobs

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Header is what every document declares about itself.
type Header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name         string            `json:"name"`
		GenerateName string            `json:"generateName"`
		Namespace    string            `json:"namespace"`
		Annotations  map[string]string `json:"annotations"`
	} `json:"metadata"`
}

// GVK is the header's group, version and kind.
func (h Header) GVK() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(h.APIVersion, h.Kind)
}

// IsList reports whether the header is a v1 List (what kubectl get -o yaml prints).
func (h Header) IsList() bool { return h.GVK() == schema.FromAPIVersionAndKind("v1", "List") }

// ListItems returns the items of a v1 List document.
func ListItems(raw []byte) ([]json.RawMessage, error) {
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("decoding List: %w", err)
	}
	return list.Items, nil
}

// ReplaceListItems returns the List document raw with its items replaced,
// every other member kept as it was.
func ReplaceListItems(raw []byte, items []json.RawMessage) ([]byte, error) {
	var list map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("decoding List: %w", err)
	}
	b, err := json.Marshal(items)
	if err != nil {
		return nil, fmt.Errorf("encoding List items: %w", err)
	}
	list["items"] = b
	out, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("encoding List: %w", err)
	}
	return out, nil
}
