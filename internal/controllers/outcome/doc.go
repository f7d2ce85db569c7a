// Package outcome carries each stopping training pod's checkpoint outcome
// out of the pod. trainguard-agent's preStop hook appends one line to the
// container's termination-message file; the kubelet copies that file into
// the pod status; this package reads it from the status of terminated
// managed pods and turns it into an Event on the pod and on its job, and
// into the trainguard_checkpoint_* metrics.
//
// Everything in a termination message is written by the tenant's container
// (the agent runs there, and so does the user's code), so it is parsed as
// hostile input: bounded, strictly decoded, from a fixed vocabulary
// (contract.ParseCheckpointOutcome, which the priority boost reads too).
package outcome
