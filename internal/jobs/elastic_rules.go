package jobs

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Rules shared by kubeflow's and KubeDL's elastic policies. Both operators
// copy these values into torchrun's flags (--nnodes=min:max,
// --max-restarts, --nproc-per-node) without checking them, so a bad value
// otherwise surfaces only when the pods start, or never.

// validateMinMax checks minReplicas ≥ 1, maxReplicas ≥ 1 and maxReplicas ≥ minReplicas.
func validateMinMax(minReplicas, maxReplicas *int32, epPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if minReplicas != nil && *minReplicas < 1 {
		errs = append(errs, field.Invalid(epPath.Child("minReplicas"), *minReplicas, "must be at least 1"))
	}
	switch {
	case maxReplicas == nil:
	case *maxReplicas < 1:
		errs = append(errs, field.Invalid(epPath.Child("maxReplicas"), *maxReplicas, "must be at least 1"))
	case minReplicas != nil && *maxReplicas < *minReplicas:
		errs = append(errs, field.Invalid(epPath.Child("maxReplicas"), *maxReplicas,
			fmt.Sprintf("must be ≥ minReplicas (%d); raise maxReplicas or lower minReplicas", *minReplicas)))
	}
	return errs
}

// validRange reports whether a [min, max] range passed validateMinMax, so
// that the replica count is only compared with a sensible range.
func validRange(minReplicas, maxReplicas int32) bool {
	return minReplicas >= 1 && maxReplicas >= minReplicas
}

// validateWorkersInRange checks that the Worker replica count lies in
// [min, max]: the operator starts that many pods, and torchrun's
// rendezvous waits forever for min nodes or refuses nodes beyond max.
func validateWorkersInRange(replicas, minReplicas, maxReplicas int32, replicasPath, epPath *field.Path) field.ErrorList {
	if !validRange(minReplicas, maxReplicas) || (replicas >= minReplicas && replicas <= maxReplicas) {
		return nil
	}
	return field.ErrorList{field.Invalid(replicasPath, replicas,
		fmt.Sprintf("must be between %s (%d) and %s (%d); set replicas in that range or change the elastic policy",
			epPath.Child("minReplicas"), minReplicas, epPath.Child("maxReplicas"), maxReplicas))}
}

// validateMaxRestarts checks maxRestarts ≥ 0.
func validateMaxRestarts(maxRestarts *int32, epPath *field.Path) field.ErrorList {
	if maxRestarts == nil || *maxRestarts >= 0 {
		return nil
	}
	return field.ErrorList{field.Invalid(epPath.Child("maxRestarts"), *maxRestarts, "must be at least 0")}
}

// validateNProcPerNode checks the elastic policy's nProcPerNode ≥ 1.
func validateNProcPerNode(nproc *int32, epPath *field.Path) field.ErrorList {
	if nproc == nil || *nproc >= 1 {
		return nil
	}
	return field.ErrorList{field.Invalid(epPath.Child("nProcPerNode"), *nproc, "must be at least 1")}
}

// deref returns *p, or def for nil.
func deref(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}
