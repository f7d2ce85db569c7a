// Package policy decides whether trainguard owns an object and what it does
// to it. Scope says whether an object is trainguard's (not an excluded
// namespace or trainguard's own, the namespace opted in or cluster-wide
// mode, the object not opted out); Resolve turns the Configuration and the
// namespace's and object's annotations into the effective contract.Policy
// (config < namespace < object), and LayerOf finds a job's own layer (a
// TrainJob's trainer pod takes its TrainJob's). Both webhooks, the
// validators and the controllers read it, so the rescheduler acts only on
// pods the webhook would inject.
package policy
