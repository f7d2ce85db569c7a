package contract

// Env variables: the one home of their names. The webhook sets the
// injected ones; the agent (internal/agent, standard library only, so it
// spells them itself) and the Python SDK (sdk/python/trainguard) read
// them. TestEnvNamesAreTheAgentsAndTheSDKs reads both and fails on any name
// they spell that is not listed here, or listed here and not read.
const (
	EnvCheckpointDir = "TRAINGUARD_CHECKPOINT_DIR"
	EnvSignalDir     = "TRAINGUARD_SIGNAL_DIR"
	EnvPodName       = "TRAINGUARD_POD_NAME"
	// EnvPodUID tells one incarnation of a pod name from the next: the SDK
	// records it with its fence generation, and the agent's request names
	// it, so that a zombie's preStop (its node back from a partition) does
	// not stop its replacement, which shares the pod name's signal dir
	// (docs/checkpoint-protocol.md).
	EnvPodUID         = "TRAINGUARD_POD_UID"
	EnvPreStopTimeout = "TRAINGUARD_PRESTOP_TIMEOUT"
	// EnvCheckpointEvery is the SDK's periodic checkpoint interval (a Go
	// duration): the platform's default (checkpoint.interval,
	// trainguard.io/checkpoint-interval) unless the container sets its own;
	// a job's migrator.periodic() call overrides both.
	EnvCheckpointEvery = "TRAINGUARD_CHECKPOINT_EVERY"
	// pytorchjob-migration compatibility.
	EnvMigrationCkptPath   = "MIGRATION_CKPT_PATH"
	EnvMigrationSignalPath = "MIGRATION_SIGNAL_PATH"

	// So that the kubelet can build the job's directory (subPathExpr) and
	// the SDK can record and check which job a checkpoint is of.
	EnvNamespace       = "TRAINGUARD_NAMESPACE"
	EnvCheckpointKey   = "TRAINGUARD_CHECKPOINT_KEY"
	EnvKubeflowJobName = "TRAINGUARD_KUBEFLOW_JOB_NAME"
	EnvOperatorJobName = "TRAINGUARD_OPERATOR_JOB_NAME"
	EnvBatchJobName    = "TRAINGUARD_BATCH_JOB_NAME"
	// The container's terminationMessagePath, where the agent appends the
	// checkpoint outcome.
	EnvTerminationMessagePath = "TRAINGUARD_TERMINATION_MESSAGE_PATH"
)

// EnvVar says who sets one env variable and who reads it.
type EnvVar struct {
	Name string
	// Injected: the webhook sets it; otherwise the user may set it on the
	// training container to tune the SDK.
	Injected bool
	// Agent and SDK read it.
	Agent, SDK bool
}

// EnvVars lists every env variable of the contract.
func EnvVars() []EnvVar {
	return []EnvVar{
		{Name: EnvCheckpointDir, Injected: true, Agent: true, SDK: true},
		{Name: EnvSignalDir, Injected: true, Agent: true, SDK: true},
		{Name: EnvPodName, Injected: true, Agent: true, SDK: true},
		{Name: EnvPodUID, Injected: true, Agent: true, SDK: true},
		{Name: EnvPreStopTimeout, Injected: true, Agent: true, SDK: true},
		{Name: EnvMigrationCkptPath, Injected: true, Agent: true, SDK: true},
		{Name: EnvMigrationSignalPath, Injected: true, Agent: true, SDK: true},
		{Name: EnvNamespace, Injected: true, SDK: true},
		{Name: EnvCheckpointKey, Injected: true, SDK: true},
		// Read by the kubelet only (subPathExpr of the checkpoint mount).
		{Name: EnvKubeflowJobName, Injected: true},
		{Name: EnvOperatorJobName, Injected: true},
		{Name: EnvBatchJobName, Injected: true},
		{Name: EnvTerminationMessagePath, Injected: true, Agent: true, SDK: true},
		// The SDK's tunables (docs/checkpoint-protocol.md).
		{Name: "TRAINGUARD_AFTER_CHECKPOINT", SDK: true},
		{Name: "TRAINGUARD_HOLD_TIMEOUT", SDK: true},
		{Name: "TRAINGUARD_KEEP_CHECKPOINTS", SDK: true},
		{Name: "TRAINGUARD_SERIALIZER", SDK: true},
		{Name: "TRAINGUARD_TEST_SAVE_DELAY", SDK: true},
		{Name: EnvCheckpointEvery, Injected: true, SDK: true},
		{Name: "TRAINGUARD_CHECKPOINT_EVERY_STEPS", SDK: true},
		// How long the SDK waits for the agent's done.json after a
		// termination checkpoint, and for its own clean exit.
		{Name: "TRAINGUARD_EXIT_WAIT", SDK: true},
		{Name: "TRAINGUARD_EXIT_GRACE", SDK: true},
		// How long a surviving rank 0 may take to commit the last completed
		// step when a peer is gone (the dying gasp; 0: off).
		{Name: "TRAINGUARD_DUMP_TIMEOUT", SDK: true},
		// The port of the SDK's work-at-risk status (StatusPort; 0 or off:
		// not served), which the priority-boost controller reads.
		{Name: "TRAINGUARD_STATUS_PORT", SDK: true},
		// How long one connection to that port may take in all (a Go
		// duration, default 2s): half-sent requests cannot pile up.
		{Name: "TRAINGUARD_STATUS_TIMEOUT", SDK: true},
		// At most one checkpoint-now request (POST CheckpointNowPath)
		// accepted per pod, and committed per job, per this (a Go duration,
		// default 30s): anyone on the pod network can send one.
		{Name: "TRAINGUARD_CHECKPOINT_NOW_MIN_INTERVAL", SDK: true},
		// In-process recovery (docs/checkpoint-protocol.md): how long a
		// survivor waits for the group to re-form (a Go duration, default
		// 30s), how often the supervisor restarts a trainer a signal killed
		// or an uncaught exception ended (default 3), the supervisor's mark on the trainer it started, and
		// "0" to start every trainer as a new process instead of forking it.
		{Name: "TRAINGUARD_REFORM_TIMEOUT", SDK: true},
		{Name: "TRAINGUARD_INPROCESS_RESTARTS", SDK: true},
		{Name: "TRAINGUARD_SUPERVISED", SDK: true},
		{Name: "TRAINGUARD_FORK", SDK: true},
	}
}
