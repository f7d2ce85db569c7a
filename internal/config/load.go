// Package config loads trainguard's configuration file into the versioned
// v1alpha1.Configuration (strictly, with every problem's path, through
// typecheck) and binds `trainguard serve`'s flags onto it (flags.go:
// BindFlags, one line per setting named by FlagName after its path;
// ApplyFlags, the one precedence rule). Only the process links it: the
// webhook and the controllers read the defaulted Configuration they are
// handed, so neither the file loader nor typecheck is in their binary's
// dependency graph (test/layers). The Configuration sits under internal/
// like jobset's api/config: the file is the public contract, not the Go type.
package config

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/typecheck"
)

// Load reads a configuration file strictly: an unknown key is an error, so
// a typo never silently falls back to a default. warnings say what the
// caller must pass on to the user (a deprecated format).
func Load(path string) (cfg *configv1alpha1.Configuration, warnings []string, err error) {
	if path == "" {
		return configv1alpha1.Default(), nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading config file: %w", err)
	}
	return Parse(data)
}

// Parse decodes, defaults and checks a configuration file's content. It
// reports every problem at once, each with its field path, as the API
// server reports an object's: unknown fields (with the nearest known one),
// values of the wrong type, keys set twice, and every value the
// configuration's rules refuse.
func Parse(data []byte) (*configv1alpha1.Configuration, []string, error) {
	raw, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing config file: %w", err)
	}
	generic, err := typecheck.DecodeJSON(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing config file: %w", err)
	}
	if _, isMap := generic.(map[string]any); generic != nil && !isMap {
		return nil, nil, fmt.Errorf("config file: Invalid value: %s: must be a mapping (apiVersion: %s, kind: %s, then the settings)",
			typecheck.ValueString(generic), configv1alpha1.APIVersion, configv1alpha1.Kind)
	}
	typeErrs, unknown := typecheck.CheckComplete(generic, reflect.TypeOf(configv1alpha1.Configuration{}))
	problems := slices.Concat(typeErrs, unknown)
	var c *configv1alpha1.Configuration
	if len(typeErrs) == 0 {
		// Unknown fields are reported above; the rest is still checked.
		if c, err = configv1alpha1.Decode(raw); err != nil {
			problems = append(problems, err.Error())
		}
	} else {
		c = &configv1alpha1.Configuration{}
		_ = json.Unmarshal(raw, &c.TypeMeta) // only the version, for the message below
	}
	var warnings []string
	switch {
	case c.APIVersion == configv1alpha1.APIVersion && c.Kind == configv1alpha1.Kind:
	case c.APIVersion == "" && c.Kind == "":
		warnings = append(warnings, fmt.Sprintf("the config file has no apiVersion and kind: this unversioned format is deprecated; "+
			"add `apiVersion: %s` and `kind: %s` at the top (nothing else changes)", configv1alpha1.APIVersion, configv1alpha1.Kind))
	default:
		return nil, nil, fmt.Errorf("config file: apiVersion %q kind %q is not supported; use apiVersion: %s, kind: %s",
			c.APIVersion, c.Kind, configv1alpha1.APIVersion, configv1alpha1.Kind)
	}
	if len(typeErrs) == 0 {
		c.APIVersion, c.Kind = configv1alpha1.APIVersion, configv1alpha1.Kind
		for _, e := range configv1alpha1.Validate(c) {
			problems = append(problems, e.Error())
		}
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("invalid config file (%d problems):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return c, warnings, nil
}
