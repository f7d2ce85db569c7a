package contract

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The parsers below are the only definition of a valid value: the
// annotation table (rules.go), the config file and the rescheduler use them.

// Recover strategies in MindCluster's vocabulary.
func recoverStrategies() []string {
	return []string{"retry", "recover", "recover-in-place", "elastic-training", "dump", "exit"}
}

// Fault-scheduling modes in MindCluster's vocabulary (its fault-scheduling
// label; trainguard.io/fault-scheduling and the Configuration's
// faultScheduling take the same): grace evicts, force may delete at once,
// off leaves the pod to its operator.
const (
	FaultSchedulingGrace = "grace"
	FaultSchedulingForce = "force"
	FaultSchedulingOff   = "off"
)

func faultSchedulingModes() []string {
	return []string{FaultSchedulingGrace, FaultSchedulingForce, FaultSchedulingOff}
}

// Limits for annotation values; a user may tighten but never exceed them.
const (
	MaxPreStopTimeout = time.Hour
	MaxGPULimit       = 64
	MaxMaxReschedules = 1000
)

// Paths a checkpoint may not be mounted under: mounting there would shadow
// kernel interfaces, the service-account token, the system's own files or
// trainguard-agent, and the agent would create and append to files there.
// /var/run is commonly a link to /run, so both spellings are refused. A
// trailing "*" matches any first path component with that prefix (/lib,
// /lib64, /libx32). trainguard-agent refuses the same list at run time
// (internal/agent/safety.go; a test keeps the two equal).
func forbiddenCheckpointRoots() []string {
	return []string{"/etc", "/usr", "/bin", "/sbin", "/lib*", "/boot", "/opt/trainguard",
		"/proc", "/sys", "/dev", "/var/run/secrets", "/run/secrets"}
}

func underForbiddenRoot(p, root string) bool {
	if prefix, ok := strings.CutSuffix(root, "*"); ok {
		first := "/" + strings.SplitN(strings.TrimPrefix(p, "/"), "/", 2)[0]
		return strings.HasPrefix(first, prefix)
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

// ParseRecoverStrategy checks a comma-separated subset of the MindCluster strategies.
func ParseRecoverStrategy(v string) (string, error) {
	seen := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		switch {
		case s != strings.TrimSpace(s):
			return "", fmt.Errorf("entry %q has spaces; write the list without them, e.g. recover,dump", s)
		case s == "":
			return "", fmt.Errorf("empty entry in comma-separated list; use a subset of %s", strings.Join(recoverStrategies(), ", "))
		case !slices.Contains(recoverStrategies(), s):
			return "", fmt.Errorf("unknown strategy %q; use a comma-separated subset of %s", s, strings.Join(recoverStrategies(), ", "))
		case seen[s]:
			return "", fmt.Errorf("strategy %q is listed twice", s)
		}
		seen[s] = true
	}
	return v, nil
}

// HasStrategy reports whether a (valid) recover-strategy list contains s.
func HasStrategy(list, s string) bool {
	for _, v := range strings.Split(list, ",") {
		if strings.TrimSpace(v) == s {
			return true
		}
	}
	return false
}

// ParseFaultScheduling checks one of grace, force, off.
func ParseFaultScheduling(v string) (string, error) {
	if !slices.Contains(faultSchedulingModes(), v) {
		return "", fmt.Errorf("must be one of %s", strings.Join(faultSchedulingModes(), ", "))
	}
	return v, nil
}

// ParseCheckpointClaim checks a PVC name.
func ParseCheckpointClaim(v string) (string, error) {
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return "", fmt.Errorf("must be the name of a PersistentVolumeClaim in this namespace: %s", strings.Join(errs, "; "))
	}
	return v, nil
}

// ParseCheckpointPath checks an absolute, clean mount path outside system directories.
func ParseCheckpointPath(v string) (string, error) {
	switch {
	case !path.IsAbs(v):
		return "", fmt.Errorf("must be an absolute path, e.g. /checkpoint")
	case path.Clean(v) != v:
		return "", fmt.Errorf("must be a clean path; use %q", path.Clean(v))
	case v == "/":
		return "", fmt.Errorf("must not be the root directory; use e.g. /checkpoint")
	}
	for _, root := range forbiddenCheckpointRoots() {
		if underForbiddenRoot(v, root) {
			return "", fmt.Errorf("must not be under the system directory %s; use e.g. /checkpoint", strings.TrimSuffix(root, "*"))
		}
	}
	return v, nil
}

// Directories the agent's emptyDir may not be mounted on, over or above:
// it is mounted into the training container, where it hides whatever the
// image holds there, so on a system directory (or a parent of one, such
// as /var for /var/run) every training container loses its libraries,
// binaries, configuration or kernel interfaces. /run and /var/run hold the
// service-account token and the runtime's sockets. A trailing "*" matches
// any first path component with that prefix, as for the checkpoint.
func forbiddenAgentRoots() []string {
	return []string{"/etc", "/usr", "/bin", "/sbin", "/lib*", "/boot", "/proc", "/sys", "/dev", "/run", "/var/run"}
}

// ParseAgentPath checks the directory the agent is copied into: an
// absolute, clean path that neither is nor holds a system directory.
func ParseAgentPath(v string) (string, error) {
	const example = "use e.g. /opt/trainguard/bin"
	switch {
	case !path.IsAbs(v):
		return "", fmt.Errorf("must be an absolute path; %s", example)
	case path.Clean(v) != v:
		return "", fmt.Errorf("must be a clean path; use %q", path.Clean(v))
	case v == "/":
		return "", fmt.Errorf("must not be the root directory: the agent's volume would hide the whole image; %s", example)
	}
	for _, root := range forbiddenAgentRoots() {
		dir := strings.TrimSuffix(root, "*")
		if underForbiddenRoot(v, root) || strings.HasPrefix(dir, v+"/") {
			return "", fmt.Errorf("must not be on, under or above the system directory %s: the agent's volume would hide it in every training container; %s", dir, example)
		}
	}
	return v, nil
}

// ParsePreStopTimeout checks a positive Go duration of at most one hour.
func ParsePreStopTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("must be a Go duration such as 90s or 5m")
	}
	if d <= 0 || d > MaxPreStopTimeout {
		return 0, fmt.Errorf("must be positive and at most %s", MaxPreStopTimeout)
	}
	return d, nil
}

// Bounds of a periodic checkpoint interval: more often than every 10s a
// checkpoint costs more than it saves, and a day is no protection.
const (
	MinCheckpointInterval = 10 * time.Second
	MaxCheckpointInterval = 24 * time.Hour
)

// ParseCheckpointInterval checks a Go duration of 0 (off) or 10s–24h.
func ParseCheckpointInterval(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("must be a Go duration such as 10m (0s: off)")
	}
	if d != 0 && (d < MinCheckpointInterval || d > MaxCheckpointInterval) {
		return 0, fmt.Errorf("must be 0s (off) or between %s and %s, such as 10m", MinCheckpointInterval, MaxCheckpointInterval)
	}
	return d, nil
}

// ParseGPULimit checks an integer accelerator count in 0–64; 0 turns the default off.
func ParseGPULimit(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || !digitsOnly(v) || n < 0 || n > MaxGPULimit {
		return 0, fmt.Errorf("must be an integer between 0 and %d", MaxGPULimit)
	}
	return n, nil
}

// ParseTaskD checks enabled or disabled.
func ParseTaskD(v string) (bool, error) {
	switch v {
	case InjectEnabled:
		return true, nil
	case InjectDisabled:
		return false, nil
	}
	return false, fmt.Errorf("must be %q or %q", InjectEnabled, InjectDisabled)
}

// ParseAdmissionMode checks "enforce" or "audit".
func ParseAdmissionMode(v string) (string, error) {
	if v == ModeEnforce || v == ModeAudit {
		return v, nil
	}
	return "", fmt.Errorf("must be %q (inject and refuse) or %q (admit unchanged, report what would be injected and refused)", ModeEnforce, ModeAudit)
}

// ParseMaxReschedules checks a non-negative integer.
func ParseMaxReschedules(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || !digitsOnly(v) || n < 0 || n > MaxMaxReschedules {
		return 0, fmt.Errorf("must be an integer between 0 and %d", MaxMaxReschedules)
	}
	return n, nil
}

// ValidateFaultSchedulingLabel checks MindCluster's fault-scheduling label.
func ValidateFaultSchedulingLabel(labels map[string]string, fldPath *field.Path) field.ErrorList {
	v, ok := labels[LabelMindClusterFaultScheduling]
	if !ok {
		return nil
	}
	if _, err := ParseFaultScheduling(v); err != nil {
		return field.ErrorList{field.Invalid(fldPath.Key(LabelMindClusterFaultScheduling), v, err.Error())}
	}
	return nil
}

// digitsOnly refuses signs and spaces strconv would accept ("+5").
func digitsOnly(v string) bool {
	for _, r := range v {
		if r < '0' || r > '9' {
			return false
		}
	}
	return v != ""
}
