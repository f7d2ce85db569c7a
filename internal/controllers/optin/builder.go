package optin

import (
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

type ctrlForOption = builder.ForOption

func forPredicates(p predicate.Predicate) ctrlForOption { return builder.WithPredicates(p) }
