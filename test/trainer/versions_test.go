package trainer

import (
	"fmt"
	"os"
	"sort"
)

// release is one Kubeflow Trainer + JobSet pair the suite runs against,
// chosen with TRAINER_VERSION (`make test-trainer` runs every pair).
type release struct {
	trainer, jobset string // versions, as hack/build-trainer.sh stamps them
	// podGroupModule holds the scheduler-plugins PodGroup CRD Trainer
	// v2.0.0's go.mod requires; "" installs none. Both releases only log
	// "PodGroup CRDs must be installed in advance" without it (their
	// coscheduling plugin checks the REST mapping), but v2.0.0 is run as it
	// was before this release pair existed; v2.3.0 shows it is not needed.
	podGroupModule string
	// configFile: Trainer's controller manager reads a Configuration file
	// (--config, from v2.1) instead of flags, and its certificate rotator
	// also fills a MutatingWebhookConfiguration
	// (defaulter.trainer.kubeflow.org, from v2.2) for its TrainJob defaulter.
	configFile bool
	// torchV20 is Trainer's v1alpha1 API up to v2.1: a runtime's
	// mlPolicy.torch has numProcPerNode and elasticPolicy, and a TrainJob's
	// spec.trainer.numProcPerNode is an int or a string (auto, cpu, gpu).
	// v2.2 removed both runtime fields and made the TrainJob's an int32.
	torchV20 bool
}

// releases are the pairs hack/build-trainer.sh builds.
func releases() map[string]release {
	return map[string]release{
		"v2.3.0": {trainer: "v2.3.0", jobset: "v0.12.0", configFile: true},
		"v2.0.0": {trainer: "v2.0.0", jobset: "v0.8.2", podGroupModule: "sigs.k8s.io/scheduler-plugins@v0.30.6", torchV20: true},
	}
}

// defaultRelease is the newest pair, the one `make cluster` runs.
const defaultRelease = "v2.3.0"

// selectRelease reads TRAINER_VERSION (default the newest pair).
func selectRelease() (release, error) {
	v := os.Getenv("TRAINER_VERSION")
	if v == "" {
		v = defaultRelease
	}
	r, ok := releases()[v]
	if !ok {
		known := make([]string, 0, len(releases()))
		for k := range releases() {
			known = append(known, k)
		}
		sort.Strings(known)
		return release{}, fmt.Errorf("TRAINER_VERSION=%q: the suite knows %v (hack/build-trainer.sh builds them)", v, known)
	}
	return r, nil
}

func (r release) trainerModule() string { return "github.com/kubeflow/trainer/v2@" + r.trainer }
func (r release) jobsetModule() string  { return "sigs.k8s.io/jobset@" + r.jobset }
func (r release) trainerBinary() string { return "trainer-controller-manager-" + r.trainer }
func (r release) jobsetBinary() string  { return "jobset-controller-" + r.jobset }

// String names the pair in the suite's summary line.
func (r release) String() string { return "Trainer " + r.trainer + ", JobSet " + r.jobset }
