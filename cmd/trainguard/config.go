package main

import (
	"fmt"
	"io"

	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/config"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
)

// loadConfig reads --config for every command and passes the file's
// warnings (a deprecated format) on to the user.
func loadConfig(path string, stderr io.Writer) (*configv1alpha1.Configuration, error) {
	cfg, warnings, err := config.Load(path)
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s: %s\n", path, w)
	}
	return cfg, err
}

// printConfig writes the configuration serve runs with: the file's,
// defaulted, with every flag given applied.
func printConfig(w io.Writer, cfg *configv1alpha1.Configuration) error {
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding the configuration: %w", err)
	}
	_, err = w.Write(out)
	return err
}
