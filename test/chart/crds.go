package chart

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
)

// Modules whose CRDs the chart's rules name: trainguard's fence and webhook
// entries are judged against the real schemas.
const (
	// KubeflowTrainingModule is the training-operator release whose CRD
	// every suite installs (and make cluster runs).
	KubeflowTrainingModule = "github.com/kubeflow/training-operator@v1.9.4"
	TrainerModule          = "github.com/kubeflow/trainer/v2@v2.3.0"
	JobSetModule           = "sigs.k8s.io/jobset@v0.12.0"
	// KueueModule is the Kueue the cluster runs (hack/cluster/lib.sh
	// KUEUE_VERSION): its Workload is what the priority boost annotates.
	KueueModule = "sigs.k8s.io/kueue@v0.19.2"
)

// WorkloadCRDs returns the paths of the CRDs of every kind trainguard
// handles: kubeflow's PyTorchJob, KubeDL's (test/crds), Kubeflow Trainer's
// TrainJob and runtimes, and JobSet, from the Go module cache (downloaded
// on first use).
func WorkloadCRDs() ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	kubeflow, err := ModuleDir(KubeflowTrainingModule)
	if err != nil {
		return nil, err
	}
	trainer, err := ModuleDir(TrainerModule)
	if err != nil {
		return nil, err
	}
	jobset, err := ModuleDir(JobSetModule)
	if err != nil {
		return nil, err
	}
	trainerCRDs := filepath.Join(trainer, "manifests", "base", "crds")
	return []string{
		filepath.Join(kubeflow, "manifests", "base", "crds", "kubeflow.org_pytorchjobs.yaml"),
		filepath.Join(root, "test", "crds", "training.kubedl.io_pytorchjobs.yaml"),
		filepath.Join(trainerCRDs, "trainer.kubeflow.org_trainjobs.yaml"),
		filepath.Join(trainerCRDs, "trainer.kubeflow.org_trainingruntimes.yaml"),
		filepath.Join(trainerCRDs, "trainer.kubeflow.org_clustertrainingruntimes.yaml"),
		filepath.Join(jobset, "config", "components", "crd", "bases", "jobset.x-k8s.io_jobsets.yaml"),
	}, nil
}

// KueueCRDs are Kueue's Workload and WorkloadPriorityClass CRDs, from the
// Go module cache.
func KueueCRDs() ([]string, error) {
	kueue, err := ModuleDir(KueueModule)
	if err != nil {
		return nil, err
	}
	bases := filepath.Join(kueue, "config", "components", "crd", "bases")
	return []string{
		filepath.Join(bases, "kueue.x-k8s.io_workloads.yaml"),
		filepath.Join(bases, "kueue.x-k8s.io_workloadpriorityclasses.yaml"),
	}, nil
}

// ModuleDir returns the directory of module@version in the Go module
// cache, downloading it on first use.
func ModuleDir(modVersion string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", modVersion).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", modVersion, err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", modVersion, err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", modVersion, m.Error)
	}
	return m.Dir, nil
}
