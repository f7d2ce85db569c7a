// Package rescheduler is trainguard's small, leader-elected controller that
// moves training pods away from failed nodes.
//
// It watches only pods trainguard manages (label trainguard.io/managed=true)
// and Nodes. For each pod it computes a Decision with the pure function
// Decide, from the pod's exit codes and reasons, the state of its node, the
// pod's MindCluster fault-scheduling label and recover-strategy annotation,
// and the job's reschedule history. When the decision is to migrate, the
// node is recorded as bad for the pod's job in a ConfigMap (see Record), the
// pod is deleted (gracefully, so the preStop checkpoint runs, or forcibly),
// and the job's controller recreates it; the pod webhook reads the record
// through NewBadNodeStore and keeps the replacement off the bad nodes. Bare
// pods, which nothing else would recreate, are recreated by the controller
// itself.
//
// See docs/rescheduler.md for the decision table, the Event reasons and the
// metrics.
package rescheduler
