// Package promreg registers Prometheus collectors the way every trainguard
// component needs: a collector already registered under the same name (a
// second manager or server in one process, as in the tests) is reused, so
// counts keep adding up in one place.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register adds c to reg and returns it, or returns the collector of the
// same type already registered under c's name. Any other conflict is an
// error, and c is returned unregistered.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// Collect is Register for a component that registers several collectors and
// reports every failure at once: an error is appended to errs.
func Collect[C prometheus.Collector](reg prometheus.Registerer, c C, errs *[]error) C {
	c, err := Register(reg, c)
	if err != nil {
		*errs = append(*errs, err)
	}
	return c
}
