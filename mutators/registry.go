package mutators

import "github.com/trainguard/trainguard/internal/foundations/contract"

// Injection is one entry of the chain: its name (in the marker annotation
// and the configuration's `mutators` switch) and what it does.
type Injection struct {
	Name string
	// Template applies it to a pod template or a pod; it reports whether
	// the injection is in place. Nil for an injection decided per pod only.
	Template func(*Target) bool
	// Pod applies it to a pod only (never a job's template), when it needs
	// what only the pod has; nil otherwise. An injection with both is put
	// into a job's template as far as the template can tell, and each pod
	// completes or undoes it (restart-rules). avoid-nodes, which also needs
	// the rescheduler's record, is applied by MutatePod itself.
	Pod func(*Target) bool
}

// Injections is the one registry of injections, in the order they run and
// are listed in the marker. Its names are contract.InjectionNames, which
// the configuration's `mutators` switch is checked against, and the chart
// schema's enum (TestRegistry*); adding an injection is its file, its name
// in contract and one line here.
func Injections() []Injection {
	return []Injection{
		{Name: contract.InjectionPreStop, Template: PreStop},
		{Name: contract.InjectionTaskD, Template: TaskD},
		{Name: contract.InjectionCheckpoint, Template: Checkpoint},
		{Name: contract.InjectionRecoverStrategy, Template: RecoverStrategy},
		{Name: contract.InjectionGPU, Template: GPU},
		// In a job's template as far as it can tell, then checked per pod:
		// the pod's own restartPolicy, the rescheduler's record.
		{Name: contract.InjectionRestartRules, Template: RestartRulesInTemplate, Pod: RestartRules},
		// Opt-in (trainguard.io/in-process-recovery); each pod's budget
		// follows the rescheduler's record.
		{Name: contract.InjectionInProcess, Template: InProcess, Pod: InProcessPod},
		// Decided per pod: the rescheduler's record (MutatePod).
		{Name: contract.InjectionAvoidNodes},
	}
}

// Names are the injections' names, in order.
func Names() []string {
	all := Injections()
	names := make([]string, len(all))
	for i, in := range all {
		names[i] = in.Name
	}
	return names
}
