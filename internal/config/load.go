package config

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
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

// Parse decodes, defaults and checks a configuration file's content.
func Parse(data []byte) (*Config, []string, error) {
	c := &Config{}
	if err := yaml.UnmarshalStrict(data, c); err != nil {
		return nil, nil, fmt.Errorf("parsing config file: %w", err)
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
	c.applyDefaults()
	if errs := c.validate(); len(errs) > 0 {
		return nil, nil, fmt.Errorf("invalid config file: %w", errs.ToAggregate())
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
