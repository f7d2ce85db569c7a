package config

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/foundations/typecheck"
)

// Load reads a configuration file strictly: an unknown key is an error, so
// a typo never silently falls back to a default. warnings say what the
// caller must pass on to the user (a deprecated format).
func Load(path string) (cfg *Config, warnings []string, err error) {
	if path == "" {
		return DefaultConfig(), nil, nil
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
func Parse(data []byte) (*Config, []string, error) {
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
			typecheck.ValueString(generic), ConfigAPIVersion, ConfigKind)
	}
	typeErrs, unknown := typecheck.CheckComplete(generic, reflect.TypeOf(Config{}))
	problems := slices.Concat(typeErrs, unknown)
	c := &Config{}
	if len(typeErrs) == 0 {
		// Unknown fields are reported above; the rest is still checked.
		if err := json.Unmarshal(raw, c); err != nil {
			problems = append(problems, err.Error())
		}
	}
	var warnings []string
	switch {
	case c.APIVersion == ConfigAPIVersion && c.Kind == ConfigKind:
	case c.APIVersion == "" && c.Kind == "":
		warnings = append(warnings, fmt.Sprintf("the config file has no apiVersion and kind: this unversioned format is deprecated; "+
			"add `apiVersion: %s` and `kind: %s` at the top (nothing else changes)", ConfigAPIVersion, ConfigKind))
	default:
		return nil, nil, fmt.Errorf("config file: apiVersion %q kind %q is not supported; use apiVersion: %s, kind: %s",
			c.APIVersion, c.Kind, ConfigAPIVersion, ConfigKind)
	}
	if len(typeErrs) == 0 {
		c.applyDefaults()
		for _, e := range c.validate() {
			problems = append(problems, e.Error())
		}
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("invalid config file (%d problems):\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return c, warnings, nil
}

// LoadConfig is Load for callers with no user to warn (tests, tools).
func LoadConfig(path string) (*Config, error) {
	cfg, _, err := Load(path)
	return cfg, err
}

// ParseConfig is Parse for callers with no user to warn (tests, tools).
func ParseConfig(data []byte) (*Config, error) {
	cfg, _, err := Parse(data)
	return cfg, err
}
