package main

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/config"
	"github.com/trainguard/trainguard/internal/controllers/rescheduler"
)

// loadConfig reads --config for every command and passes the file's
// warnings (a deprecated format) on to the user.
func loadConfig(path string, stderr io.Writer) (*config.Config, error) {
	cfg, warnings, err := config.Load(path)
	for _, w := range warnings {
		fmt.Fprintf(stderr, "warning: %s: %s\n", path, w)
	}
	return cfg, err
}

// printConfig writes the configuration serve runs with: cfg, with its
// rescheduler block replaced by the options in effect (flags applied).
func printConfig(w io.Writer, cfg *config.Config, resched rescheduler.Options) error {
	effective := *cfg
	effective.Rescheduler = resched.Config()
	out, err := yaml.Marshal(&effective)
	if err != nil {
		return fmt.Errorf("encoding the configuration: %w", err)
	}
	_, err = w.Write(out)
	return err
}

// reschedulerOptions are the rescheduler's settings: the config file's,
// then every rescheduler flag given on the command line on top. A flag
// wins only when it was set, so a file value is never overwritten by a
// flag's default. namespace is trainguard's own (serve --namespace), where
// the records live.
func reschedulerOptions(c config.ReschedulerConfig, flags *pflag.FlagSet, namespace string) (rescheduler.Options, error) {
	o := rescheduler.OptionsFrom(c, namespace)
	// Replay the set flags onto a flag set bound to o: the rescheduler's
	// own BindFlags stays the one list of its flags.
	fromFile := pflag.NewFlagSet("rescheduler", pflag.ContinueOnError)
	o.BindFlags(fromFile)
	var err error
	flags.Visit(func(f *pflag.Flag) {
		if fromFile.Lookup(f.Name) != nil && err == nil {
			err = fromFile.Set(f.Name, f.Value.String())
		}
	})
	if err != nil {
		return o, err
	}
	err = o.Validate()
	return o, err
}
