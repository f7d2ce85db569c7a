package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation/field"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
)

// Precedence is the one rule between the file and the flags, for --help
// and the docs: jobset's.
const Precedence = "a flag given on the command line wins over the --config file, which wins over the built-in default; a flag left out never overrides the file"

// FlagName is the flag of the setting at a Configuration path: the path's
// keys in kebab-case (agent.image is --agent-image). The rescheduler's
// block drops its prefix (rescheduler.nodeLostGrace is --node-lost-grace)
// and its switch is --rescheduler, the names these flags had before the
// file did.
func FlagName(path string) string {
	if path == "rescheduler.enabled" {
		return "rescheduler"
	}
	path = strings.TrimPrefix(path, "rescheduler.")
	var b strings.Builder
	rs := []rune(path)
	for i, r := range rs {
		switch {
		case r == '.':
			b.WriteByte('-')
		case unicode.IsUpper(r):
			// A capital starts a word unless it continues an acronym (TTL).
			if i > 0 && rs[i-1] != '.' && (!unicode.IsUpper(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
				b.WriteByte('-')
			}
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// renamedFlags are flags whose name predates FlagName; they still work.
var renamedFlags = map[string]string{
	"reschedule-backoff-base": FlagName("rescheduler.backoffBase"),
	"reschedule-backoff-max":  FlagName("rescheduler.backoffMax"),
}

// NormalizeFlagName maps a renamed flag to its FlagName (a pflag
// NormalizeFunc), so command lines written for earlier releases still run.
func NormalizeFlagName(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if n, ok := renamedFlags[name]; ok {
		return pflag.NormalizedName(n)
	}
	return pflag.NormalizedName(name)
}

// BindFlags registers one flag per setting of c, bound to c's fields: c's
// current values (defaulted) are the flags' defaults in --help. It is the
// one list of the settings' flags; ApplyFlags replays the given ones onto
// the loaded file through it.
func BindFlags(fs *pflag.FlagSet, c *configv1alpha1.Configuration) {
	r := &c.Rescheduler
	b := binder{fs}
	b.Bool(&c.ClusterWide, "clusterWide", "inject every namespace except the excluded ones, without waiting for the namespace's opt-in annotation")
	b.String(&c.AdmissionMode, "admissionMode", "enforce (inject and refuse) or audit (admit unchanged, report what would be injected and refused); a namespace's trainguard.io/admission-mode overrides it")
	b.StringSlice(&c.ExcludedNamespaces, "excludedNamespaces", "namespaces never mutated (kube-system, every kube-* namespace and trainguard's own are always excluded)")
	b.String(&c.Checkpoint.Claim, "checkpoint.claim", "PVC mounted for checkpoints; empty adds no volume")
	b.String(&c.Checkpoint.Path, "checkpoint.path", "where the checkpoint claim is mounted in the training container")
	b.Duration(&c.Checkpoint.PreStopTimeout.Duration, "checkpoint.preStopTimeout", "how long the agent's preStop hook waits for the trainer's checkpoint")
	b.Duration(&c.Checkpoint.Interval.Duration, "checkpoint.interval", "default periodic checkpoint interval of training pods (the SDK's TRAINGUARD_CHECKPOINT_EVERY); 0 is off")
	b.Duration(&c.Checkpoint.GracePeriodMargin.Duration, "checkpoint.gracePeriodMargin", "added to the preStop timeout to form the minimum terminationGracePeriodSeconds")
	b.Bool(&c.Checkpoint.RequireDurable, "checkpoint.requireDurable", "refuse training pods whose checkpoints would be lost with the pod (no claim) instead of warning")
	b.Bool(c.TaskD.Enabled, "taskd.enabled", "inject MindCluster's TaskD port")
	b.Int32(c.TaskD.Port, "taskd.port", "MindCluster TaskD port")
	b.String(&c.RecoverStrategy, "recoverStrategy", "default recover strategy of jobs that set none (trainguard.io/recover-strategy)")
	b.String(&c.FaultScheduling, "faultScheduling", "default fault scheduling of jobs that set none: grace, force or off")
	b.String((*string)(&c.GPU.ResourceName), "gpu.resourceName", "accelerator resource of the default limit")
	b.Int64(c.GPU.DefaultCount, "gpu.defaultCount", "accelerator limit set on training containers that have none; 0 turns the default off")
	b.String(&c.GPU.DefaultFor, "gpu.defaultFor", "which jobs get the default accelerator limit: AcceleratorJobs or AllJobs")
	b.String(&c.Agent.Image, "agent.image", "image of the injected trainguard-agent init container (pinned to this release)")
	b.String((*string)(&c.Agent.ImagePullPolicy), "agent.imagePullPolicy", "pull policy of the agent init container")
	b.String(&c.Agent.Path, "agent.path", "directory of the shared emptyDir the agent is copied into")
	b.StringSlice(&c.Agent.InstallCommand, "agent.installCommand", "command the agent init container runs; the target directory is appended")
	b.StringSlice(&c.TrainingContainer.Names, "trainingContainer.names", "names of the training container, in order of preference; else the pod's first container")
	b.Var(&boolMap{m: &c.Mutators}, "mutators", "switch injections off (or on) by name, e.g. gpu=false,taskd=false")
	b.Int(c.MaxReschedules, "maxReschedules", "reschedules per job at most (trainguard.io/max-reschedules overrides it); 0 means never")

	b.Bool(r.Enabled, "rescheduler.enabled",
		"run the rescheduling controller (leader-elected); when false, no pod is deleted or recreated and the pod webhook avoids no node")
	b.Duration(&r.NodeLostGrace.Duration, "rescheduler.nodeLostGrace",
		"how long a node may be NotReady or Unknown before its training pods count as lost and are rescheduled")
	b.Duration(&r.GraceOverTime.Duration, "rescheduler.graceOverTime",
		"with fault-scheduling=grace, how long a graceful delete may hang on an unreachable node before the pod is force-deleted")
	b.Duration(&r.BadNodeTTL.Duration, "rescheduler.badNodeTTL", "how long a node stays recorded as bad for a job (its replacement pods avoid it)")
	b.Int(&r.MaxBadNodes, "rescheduler.maxBadNodes", "most nodes recorded as bad per job; the oldest records are dropped first")
	b.Bool(&r.UnknownExitCodeRetryable, "rescheduler.unknownExitCodeRetryable",
		"treat exit codes outside kubeflow's ExitCode table (e.g. 3, 134, 255) as retryable instead of permanent")
	b.Duration(&r.BackoffBase.Duration, "rescheduler.backoffBase",
		"first backoff between two reschedule rounds of one job; doubles each round. Pods needing action within this time of a round share it (was --reschedule-backoff-base, which still works)")
	b.Duration(&r.BackoffMax.Duration, "rescheduler.backoffMax", "longest backoff between two reschedule rounds of one job (was --reschedule-backoff-max, which still works)")
	b.Duration(&r.ForceDeleteAfter.Duration, "rescheduler.forceDeleteAfter",
		"how long a node must have been unreachable (kubelet silent, or NotReady/Unknown) before pods on it may be force-deleted "+
			"(marked Failed, grace period 0, bypassing PodDisruptionBudgets); a silent kubelet is not waited for by --grace-over-time. "+
			"Below it pods are only evicted through the Eviction API. A deleted Node needs no wait. Safe because a stale trainer "+
			"cannot commit over its replacement's checkpoints (fencing, docs/checkpoint-protocol.md)")
	b.Duration(&r.LeaseLostAfter.Duration, "rescheduler.leaseLostAfter",
		"how long a node's kubelet may leave its Lease (kube-node-lease) unrenewed, as trainguard observes it, before the node's "+
			"training pods count as lost, ahead of the node lifecycle controller's NotReady. Default: the kubelet's lease duration "+
			"(it renews every 10 s), so a slow but alive kubelet is never acted on")
	b.Float64(r.NodeEvictionRate, "rescheduler.nodeEvictionRate",
		"lost nodes per second the rescheduler may start acting on (evicting their training pods), cluster-wide; a token bucket like "+
			"kube-controller-manager's --node-eviction-rate (same default, 0.1 = one node every 10 s). 0 stops all action on lost nodes. "+
			"Pods retried for their exit take --retry-eviction-rate instead")
	b.Int(&r.NodeEvictionBurst, "rescheduler.nodeEvictionBurst",
		"nodes the rescheduler may act on at once before --node-eviction-rate applies (an incident of a rack or a switch)")
	b.Float64(&r.UnhealthyZoneThreshold, "rescheduler.unhealthyZoneThreshold",
		"brake: when more than this fraction of a zone's nodes that carry managed pods are NotReady/Unknown (and at least 3 of them), "+
			"a partition is suspected and nothing in the zone is evicted or deleted until it recovers (Event, log, metric "+
			"trainguard_rescheduler_brake_engaged). Same default as kube-controller-manager's --unhealthy-zone-threshold. 1 disables the brake")
	b.Float64(&r.UnhealthyClusterThreshold, "rescheduler.unhealthyClusterThreshold",
		"brake: when more than this fraction of all nodes that carry managed pods are unhealthy, or of all node Leases silent for "+
			"--lease-lost-after (and at least 2), the control plane or trainguard's own view is suspected and nothing is evicted or deleted "+
			"(Event PartitionSuspected, log, trainguard_rescheduler_brake_engaged{zone=\"(cluster)\"}). Catches what the zone brake cannot in "+
			"small zones (it needs 3 unhealthy nodes per zone). 1 disables it")
	b.Float64(r.RetryEvictionRate, "rescheduler.retryEvictionRate",
		"pods per second, per namespace, the rescheduler may evict for a retryable exit (137, 143, ...): a token bucket apart from "+
			"--node-eviction-rate, so one tenant's failing jobs never delay another's recovery from a lost node. 0 stops exit retries")
	b.Int(&r.ConcurrentReconciles, "rescheduler.concurrentReconciles",
		"pods the rescheduler judges and acts on at once; each action waits on a few API round trips, so raise it when many pods "+
			"need action together on a large cluster (1-64)")
	b.Int(&r.RetryEvictionBurst, "rescheduler.retryEvictionBurst",
		"pods of one namespace evicted at once for a retryable exit before --retry-eviction-rate applies (a whole job's workers)")
	pb := &c.PriorityBoost
	b.Bool(&pb.Enabled, "priorityBoost.enabled",
		"write kueue.x-k8s.io/priority-boost on training jobs' Kueue Workloads from their work at risk; only once Kueue runs "+
			"with its PriorityBoost feature gate, which trainguard cannot see (docs/preemption.md)")
	b.Int32(pb.MaxBoost, "priorityBoost.maxBoost",
		"highest priority boost, 0-1000000; each job's also stays strictly below the next priority class above its own")
	b.Duration(&pb.MinInterval.Duration, "priorityBoost.minInterval", "at most one priority-boost change per Workload this often")
	nw := &c.NodeWarnings
	b.Bool(nw.Enabled, "nodeWarnings.enabled",
		"ask each job with a rank on a node that warns (nodeWarnings.conditions, nodeWarnings.taints) to commit a checkpoint now and train on (docs/node-warnings.md); runs with the rescheduler")
	b.StringSlice(&nw.Conditions, "nodeWarnings.conditions",
		"node conditions that warn of the node's loss, as Type=Status, comma-separated (default: Kubernetes' NodeLifecycleConditions); empty listens to none")
	b.StringSlice(&nw.Taints, "nodeWarnings.taints", "taint keys that warn of the node's loss, comma-separated (any value or effect)")
	b.Duration(&nw.CommitTimeout.Duration, "nodeWarnings.commitTimeout",
		"how long a trainer has from the checkpoint-now request to commit the step it acknowledged; past it the Event says TrainerDidNotAnswer and the job trains on")
	b.Duration(&nw.MinInterval.Duration, "nodeWarnings.minInterval", "at most one checkpoint-now request per job this often (a flapping condition is no checkpoint storm)")
	b.Float64(&nw.BrakeThreshold, "nodeWarnings.brakeThreshold",
		"brake: when more than this fraction of the nodes carrying managed pods warn at once (and at least --node-warnings-brake-min-nodes), "+
			"the warning source is suspected and no request is sent until it clears. 1 disables it")
	b.Int(&nw.BrakeMinNodes, "nodeWarnings.brakeMinNodes", "warning nodes the brake needs at least")
	le := &c.LeaderElection
	b.Duration(&le.LeaseDuration.Duration, "leaderElection.leaseDuration",
		"with --leader-elect, how long the other replicas wait after the leader's last renewal before taking over")
	b.Duration(&le.RenewDeadline.Duration, "leaderElection.renewDeadline",
		"with --leader-elect, how long the leader retries a renewal before it gives up leadership and exits (below the lease duration); "+
			"raise it with the lease duration when the API server is too busy to answer within it")
	b.Duration(&le.RetryPeriod.Duration, "leaderElection.retryPeriod", "with --leader-elect, time between two attempts to acquire or renew the lease")
}

// binder names each flag after its Configuration path (FlagName) and
// appends the path to the usage, so --help shows the file key too.
type binder struct{ fs *pflag.FlagSet }

func usage(path, text string) string { return text + " (file: " + path + ")" }

func (b binder) Bool(p *bool, path, text string) {
	b.fs.BoolVar(p, FlagName(path), *p, usage(path, text))
}
func (b binder) String(p *string, path, text string) {
	b.fs.StringVar(p, FlagName(path), *p, usage(path, text))
}
func (b binder) StringSlice(p *[]string, path, text string) {
	b.fs.StringSliceVar(p, FlagName(path), *p, usage(path, text))
}
func (b binder) Int(p *int, path, text string) { b.fs.IntVar(p, FlagName(path), *p, usage(path, text)) }
func (b binder) Int32(p *int32, path, text string) {
	b.fs.Int32Var(p, FlagName(path), *p, usage(path, text))
}
func (b binder) Int64(p *int64, path, text string) {
	b.fs.Int64Var(p, FlagName(path), *p, usage(path, text))
}
func (b binder) Float64(p *float64, path, text string) {
	b.fs.Float64Var(p, FlagName(path), *p, usage(path, text))
}
func (b binder) Var(v pflag.Value, path, text string) { b.fs.Var(v, FlagName(path), usage(path, text)) }
func (b binder) Duration(p *time.Duration, path, text string) {
	b.fs.DurationVar(p, FlagName(path), *p, usage(path, text))
}

// ApplyFlags sets on c, the loaded file (defaulted), every setting whose
// flag was given on the command line (pflag's Changed), then checks the
// result as the file is checked: the one precedence rule, for every flag.
// given is the command's flag set, bound (BindFlags) onto a throwaway
// Configuration; its values are replayed onto c.
func ApplyFlags(c *configv1alpha1.Configuration, given *pflag.FlagSet) error {
	onto := pflag.NewFlagSet("configuration", pflag.ContinueOnError)
	BindFlags(onto, c)
	var errs []error
	given.Visit(func(f *pflag.Flag) {
		t := onto.Lookup(f.Name)
		if t == nil {
			return // a flag of the process, not a setting
		}
		var err error
		if s, ok := f.Value.(pflag.SliceValue); ok {
			err = t.Value.(pflag.SliceValue).Replace(s.GetSlice())
		} else {
			err = t.Value.Set(f.Value.String())
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", f.Name, err))
		}
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return validate(c, onto)
}

// validate reports a Configuration's problems as Parse does, naming each
// field's flag as well as its file path.
func validate(c *configv1alpha1.Configuration, flags *pflag.FlagSet) error {
	problems := configv1alpha1.Validate(c)
	if len(problems) == 0 {
		return nil
	}
	lines := make([]string, 0, len(problems))
	for _, e := range problems {
		line := e.Error()
		if name := FlagName(fieldRoot(e)); flags.Lookup(name) != nil {
			line += " (flag --" + name + ")"
		}
		lines = append(lines, line)
	}
	return fmt.Errorf("invalid settings, from the --config file and the flags (%d problems):\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// fieldRoot is an error's field path without a map key or list index (mutators[gpus] is mutators).
func fieldRoot(e *field.Error) string {
	if i := strings.IndexByte(e.Field, '['); i >= 0 {
		return e.Field[:i]
	}
	return e.Field
}

// boolMap is a map[string]bool flag: name=true,name=false. Each use adds
// to the map, as pflag's StringToString does.
type boolMap struct{ m *map[string]bool }

func (b *boolMap) String() string {
	keys := make([]string, 0, len(*b.m))
	for k := range *b.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.FormatBool((*b.m)[k])
	}
	return strings.Join(parts, ",")
}

func (b *boolMap) Set(v string) error {
	if v == "" {
		return nil
	}
	for part := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(part, "=")
		on, err := strconv.ParseBool(val)
		if !ok || k == "" || err != nil {
			return fmt.Errorf("%q: use name=true or name=false, comma-separated", part)
		}
		if *b.m == nil {
			*b.m = map[string]bool{}
		}
		(*b.m)[k] = on
	}
	return nil
}

func (b *boolMap) Type() string { return "name=bool,..." }
