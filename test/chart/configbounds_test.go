package chart

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/trainguard/trainguard/internal/config"
	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
)

// everyConfigField sets each Configuration field to a value other than its
// default, through the chart's values: config.* for the file's settings,
// the top-level values for those the webhook selectors read too.
const everyConfigField = `
clusterWide: true
excludedNamespaces: [batch-system]
rescheduler:
  enabled: false
config:
  checkpoint:
    claim: team-ckpt
    path: /data/ckpt
    preStopTimeout: 5m
    interval: 15m
    gracePeriodMargin: 45s
    requireDurable: true
  taskd:
    enabled: false
    port: 9700
  recoverStrategy: recover,dump
  faultScheduling: force
  admissionMode: audit
  gpu:
    resourceName: huawei.com/Ascend910
    defaultCount: 8
    defaultFor: AllJobs
  agent:
    image: registry.example/agent:2
    imagePullPolicy: Always
    path: /opt/tg
    installCommand: [/agent, install, --quiet]
  trainingContainer:
    names: [trainer, pytorch]
  mutators:
    gpu: false
  maxReschedules: 0
  priorityBoost:
    enabled: true
    maxBoost: 250
    minInterval: 90s
  nodeWarnings:
    enabled: false
    conditions: [KernelDeadlock=True, GPUHealthy=False]
    taints: [example.com/gpu-failing]
    commitTimeout: 30s
    minInterval: 10m
    brakeThreshold: 0.3
    brakeMinNodes: 4
  leaderElection:
    leaseDuration: 45s
    renewDeadline: 30s
    retryPeriod: 5s
  rescheduler:
    nodeLostGrace: 2m
    graceOverTime: 20m
    badNodeTTL: 3h
    maxBadNodes: 4
    unknownExitCodeRetryable: true
    backoffBase: 20s
    backoffMax: 10m
    forceDeleteAfter: 2m
    leaseLostAfter: 50s
    nodeEvictionRate: 0.5
    nodeEvictionBurst: 7
    unhealthyZoneThreshold: 0.7
    unhealthyClusterThreshold: 0.6
    retryEvictionRate: 2
    retryEvictionBurst: 9
    concurrentReconciles: 8
`

// TestEveryConfigurationFieldIsSettableThroughValues: every field of the
// Configuration can be set through the chart's values and reaches the
// running binary: the rendered file and the Deployment's own arguments are
// given to the real `trainguard serve --print-config`, whose effective
// configuration must hold each value set.
func TestEveryConfigurationFieldIsSettableThroughValues(t *testing.T) {
	helm, dir := helmAndChart(t)
	valuesFile := valuesFile(t, []byte(everyConfigField))
	objs, err := RenderWith(helm, dir, "trainguard", "trainguard-system", "-f", valuesFile)
	require.NoError(t, err)
	_, raw := renderedConfig(t, objs, renderCase{fullname: "trainguard"})
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(configFile, []byte(raw), 0o600))
	d := deployment(t, objs, renderCase{fullname: "trainguard"})
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--config=") {
			a = "--config=" + configFile
		}
		args = append(args, a)
	}
	serve := exec.Command(buildTrainguard(t), append(args, "--print-config")...)
	var stderr strings.Builder
	serve.Stderr = &stderr
	out, err := serve.Output()
	require.NoError(t, err, "trainguard serve --print-config: %s", stderr.String())
	var effective map[string]any
	require.NoError(t, yaml.Unmarshal(out, &effective))
	got := leaves("", effective)

	var values map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(everyConfigField), &values))
	want := leaves("", values["config"].(map[string]any))
	want["clusterWide"] = true
	// The chart adds its own always-excluded namespaces; the one set here must be among them.
	assert.Subset(t, got["excludedNamespaces"], []any{"kube-system", "trainguard-system", "batch-system"})
	want["excludedNamespaces"] = got["excludedNamespaces"]
	want["rescheduler.enabled"] = false
	want["apiVersion"], want["kind"] = configv1alpha1.APIVersion, configv1alpha1.Kind
	for key, v := range want {
		assert.True(t, sameValue(v, got[key]), "%s: set %v through values, the binary runs with %v", key, v, got[key])
	}
	// Every field of the Configuration is in the test (a new field needs a
	// value here and a way through the chart).
	for _, f := range configFields("", reflect.TypeOf(configv1alpha1.Configuration{})) {
		_, ok := want[f]
		assert.True(t, ok, "Configuration field %s is not set through the chart's values in this test", f)
	}
}

// everyFieldSetting is everyConfigField as Configuration paths: each
// field's value other than its default.
func everyFieldSetting(t *testing.T) map[string]any {
	t.Helper()
	var values map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(everyConfigField), &values))
	want := leaves("", values["config"].(map[string]any))
	want["clusterWide"] = values["clusterWide"]
	want["excludedNamespaces"] = values["excludedNamespaces"]
	want["rescheduler.enabled"] = values["rescheduler"].(map[string]any)["enabled"]
	return want
}

// flagValue writes a value of everyConfigField as a flag's argument.
func flagValue(v any) string {
	switch v := v.(type) {
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = fmt.Sprint(e)
		}
		return strings.Join(parts, ",")
	case map[string]any:
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(v)) {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v[k]))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

// TestEveryConfigurationFieldIsSettableThroughFlagsAndFile: the same walk
// over the Configuration's fields as the chart's test above, for the two
// other ways in. Each field has a flag named after its path
// (config.FlagName), and the real `trainguard serve --print-config` runs
// with every value set through the flags alone, and through the file alone.
func TestEveryConfigurationFieldIsSettableThroughFlagsAndFile(t *testing.T) {
	want := everyFieldSetting(t)
	serveFlags := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	config.BindFlags(serveFlags, configv1alpha1.Default())
	var args []string
	for _, path := range configFields("", reflect.TypeOf(configv1alpha1.Configuration{})) {
		if path == "apiVersion" || path == "kind" {
			continue
		}
		v, ok := want[path]
		if !assert.True(t, ok, "Configuration field %s has no value in everyConfigField", path) {
			continue
		}
		name := config.FlagName(path)
		if assert.NotNil(t, serveFlags.Lookup(name), "Configuration field %s has no flag --%s: add its line to config.BindFlags", path, name) {
			args = append(args, "--"+name+"="+flagValue(v))
		}
	}
	bin := buildTrainguard(t)
	check := func(how string, args ...string) {
		t.Helper()
		serve := exec.Command(bin, append([]string{"serve", "--print-config"}, args...)...)
		var stderr strings.Builder
		serve.Stderr = &stderr
		out, err := serve.Output()
		require.NoError(t, err, "trainguard serve --print-config (%s): %s", how, stderr.String())
		var effective map[string]any
		require.NoError(t, yaml.Unmarshal(out, &effective))
		got := leaves("", effective)
		for path, v := range want {
			assert.True(t, sameValue(v, got[path]), "%s: %s set to %v, the binary runs with %v", how, path, v, got[path])
		}
	}
	check("flags", args...)

	file := map[string]any{"apiVersion": configv1alpha1.APIVersion, "kind": configv1alpha1.Kind}
	for path, v := range want {
		merge(file, nested(path, v))
	}
	raw, err := yaml.Marshal(file)
	require.NoError(t, err)
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(configFile, raw, 0o600))
	want["excludedNamespaces"] = append(want["excludedNamespaces"].([]any), "kube-system") // always added
	check("file", "--config="+configFile)
}

// merge adds src's keys into dst, recursively.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sub, ok := v.(map[string]any); ok && k != "mutators" {
			if d, ok := dst[k].(map[string]any); ok {
				merge(d, sub)
				continue
			}
		}
		dst[k] = v
	}
}

// TestValuesSchemaAgreesWithTheBinary: for values at and beyond every
// bound, `helm template` (schema and the chart's checks) and the binary's
// configuration validation give the same verdict, both ways: nothing
// renders that then crash-loops, and nothing the binary takes is refused.
func TestValuesSchemaAgreesWithTheBinary(t *testing.T) {
	helm, dir := helmAndChart(t)
	probes := []struct {
		path string
		vals []any
		// top: the value is a top-level value of the chart (which renders
		// it into the file), not one under config.
		top bool
		// with: other settings (paths under config) given along.
		with map[string]any
		// accepted and refused: values both must accept (a bound's edge)
		// or both refuse, besides agreeing.
		accepted, refused []any
	}{
		{path: "checkpoint.claim", vals: []any{"ckpt", "team.ckpt-1", "Bad_Name", strings.Repeat("a", 254)}},
		{path: "checkpoint.path", vals: []any{"/checkpoint", "/.hidden", "/opt/trainguardx", "/etc/ckpt", "/etc", "/lib64/x", "/opt/trainguard/ckpt",
			"/proc", "/var/run/secrets/x", "/run/secrets", "ckpt", "/ckpt/", "/a/../b", "/a/./b", "/", "//ckpt"}},
		{path: "checkpoint.preStopTimeout", vals: []any{"60s", "1h", "59m59s", "3600s", "1.5m", "2h", "3601s", "90m", "0s", "soon", "-1s"}},
		{path: "checkpoint.interval", vals: []any{"0s", "10m", "1h", "soon", "-1s"},
			accepted: []any{"10s", "10000ms", "24h", "1440m"}, refused: []any{"1ns", "9s", "9.999s", "24h0m1s", "25h"}},
		{path: "checkpoint.gracePeriodMargin", vals: []any{"0s", "30s", "-1s", "later"}},
		{path: "taskd.port", vals: []any{1, 9601, 65535, 0, 65536, -1}},
		{path: "recoverStrategy", vals: []any{"recover", "recover,dump", "recover,recover", "recover, dump", "bogus", ""}},
		{path: "faultScheduling", vals: []any{"grace", "off", "Grace"}},
		{path: "admissionMode", vals: []any{"audit", "enforce", "Audit"}},
		{path: "gpu.defaultCount", vals: []any{0, 64, 65, 100, -1}},
		{path: "gpu.defaultFor", vals: []any{"AllJobs", "Some"}},
		{path: "gpu.resourceName",
			accepted: []any{"nvidia.com/gpu", "huawei.com/Ascend910", "amd.com/gpu", "example.com/a_b.c-d",
				"example.com/" + strings.Repeat("g", 63), strings.Repeat("a", 240) + ".com/gpu"},
			refused: []any{"not a name", "gpu", "cpu", "memory", "hugepages-2Mi", "kubernetes.io/gpu", "gpu.kubernetes.io/gpu",
				"requests.example.com/gpu", "Example.com/gpu", "example.com/", "example.com/-gpu", "example.com/a/b", "/gpu",
				"example.com/" + strings.Repeat("g", 64), strings.Repeat("a", 241) + ".com/gpu"}},
		{path: "agent.imagePullPolicy", accepted: []any{"Always", "IfNotPresent", "Never", ""}, refused: []any{"Sometimes", "always"}},
		{path: "agent.path", vals: []any{"/opt/x", "/opt/x/", "opt/x", "/opt/../x"},
			accepted: []any{"/opt/trainguard/bin", "/usrx", "/varx", "/var/lib/tg", "/runner"},
			refused: []any{"/", "/usr", "/usr/local/bin", "/bin", "/sbin/x", "/lib", "/lib64", "/lib64/x", "/libx32", "/library/x", "/etc", "/proc/x", "/sys",
				"/dev/x", "/boot", "/run", "/run/x", "/var/run", "/var/run/x", "/var"}},
		{path: "trainingContainer.names", accepted: []any{[]any{"pytorch", "trainer-0"}, []any{strings.Repeat("a", 63)}},
			refused: []any{[]any{""}, []any{"pytorch", ""}, []any{"Pytorch"}, []any{"a_b"}, []any{"a.b"}, []any{strings.Repeat("a", 64)}}},
		{path: "excludedNamespaces", top: true, accepted: []any{[]any{"batch-system"}, []any{strings.Repeat("a", 63)}},
			refused: []any{[]any{"*"}, []any{""}, []any{"team-*"}, []any{"Batch"}, []any{"a.b"}, []any{strings.Repeat("a", 64)}}},
		{path: "mutators", vals: []any{map[string]any{"gpu": false}, map[string]any{"gpus": false}}},
		{path: "maxReschedules", vals: []any{0, 1000, 1001, -1}},
		{path: "priorityBoost.maxBoost", vals: []any{0, 100, 1000000, 1000001, -1}},
		{path: "priorityBoost.minInterval", vals: []any{"1m", "1h", "3601s", "0s", "-1s", "soon"},
			accepted: []any{"10s", "10000ms", "0.5m"}, refused: []any{"1ns", "9s", "9.999s"}},
		{path: "nodeWarnings.conditions", accepted: []any{[]any{}, []any{"MaintenancePlanned=True"}, []any{"example.com/GPU_Health-1=Unknown"}},
			refused: []any{[]any{"MaintenancePlanned"}, []any{"MaintenancePlanned=true"}, []any{"=True"}, []any{"Bad Type=True"}, []any{"a/b/c=True"}}},
		{path: "nodeWarnings.taints", accepted: []any{[]any{"example.com/gpu-failing"}}, refused: []any{[]any{""}, []any{"bad key"}}},
		{path: "nodeWarnings.commitTimeout", accepted: []any{"5s", "1h"}, refused: []any{"4.9s", "0s", "61m", "-1s"}},
		{path: "nodeWarnings.minInterval", accepted: []any{"10s", "24h"}, refused: []any{"9s", "0s", "25h"}},
		{path: "nodeWarnings.brakeThreshold", accepted: []any{0.1, 1}, refused: []any{0, 1.5, -0.5}},
		{path: "nodeWarnings.brakeMinNodes", accepted: []any{1, 100}, refused: []any{0, -1}},
		{path: "leaderElection.leaseDuration", vals: []any{"15s", "1m", "10s", "9s", "0s", "-1s"},
			accepted: []any{"5m", "300s", "4m59s"}, refused: []any{"5m1s", "301s", "1000h"}},
		{path: "leaderElection.renewDeadline", vals: []any{"10s", "14s", "15s", "2.3s", "2.5s", "0s"}, refused: []any{"1000h"}},
		{path: "leaderElection.renewDeadline", with: map[string]any{"leaderElection.leaseDuration": "5m"},
			accepted: []any{"4m59s"}, refused: []any{"5m", "1000h"}},
		{path: "leaderElection.retryPeriod", vals: []any{"2s", "8s", "8.4s", "9s", "0s"}, refused: []any{"1000h"}},
		{path: "leaderElection.retryPeriod", with: map[string]any{"leaderElection.leaseDuration": "5m", "leaderElection.renewDeadline": "4m"},
			accepted: []any{"3m", "199s"}, refused: []any{"200s", "1000h"}},
		{path: "leaderElection.leaseDuration", with: map[string]any{"leaderElection.renewDeadline": "999h", "leaderElection.retryPeriod": "1h"},
			refused: []any{"1000h"}},
		{path: "rescheduler.nodeLostGrace", vals: []any{"10s", "0s"}, accepted: []any{"10000ms", "1m"}, refused: []any{"1ms", "1ns", "9s", "9.999s"}},
		{path: "rescheduler.leaseLostAfter", vals: []any{"40s", "0s"}, accepted: []any{"20s", "20000ms", "0.5m"},
			refused: []any{"1s", "8s", "15s", "19s", "19.999s"}},
		{path: "rescheduler.forceDeleteAfter", accepted: []any{"10s", "40s"}, refused: []any{"1ns", "1ms", "9s", "9.999s", "0s"}},
		{path: "rescheduler.maxBadNodes", vals: []any{1, 16, 0, -1}},
		{path: "rescheduler.nodeEvictionBurst", vals: []any{1, 0}},
		{path: "rescheduler.nodeEvictionRate", vals: []any{0, 0.1, -0.1}},
		{path: "rescheduler.unhealthyZoneThreshold", vals: []any{0.5, 1, 0, 1.5}},
		{path: "rescheduler.unhealthyClusterThreshold", vals: []any{0.5, 1, 0, 1.5}},
		{path: "rescheduler.retryEvictionRate", vals: []any{0, 0.1, -0.1}},
		{path: "rescheduler.retryEvictionBurst", vals: []any{1, 0}},
		{path: "rescheduler.concurrentReconciles", vals: []any{1, 64, 0, 65}},
		{path: "rescheduler.backoffMax", vals: []any{"10s", "9s", "1h"}},
	}
	for _, p := range probes {
		want := map[string]bool{}
		for _, v := range p.accepted {
			want[fmt.Sprint(v)] = true
		}
		for _, v := range p.refused {
			want[fmt.Sprint(v)] = false
		}
		for _, v := range slices.Concat(p.vals, p.accepted, p.refused) {
			name := fmt.Sprintf("%s=%v", p.path, v)
			for _, k := range slices.Sorted(maps.Keys(p.with)) {
				name += fmt.Sprintf(",%s=%v", k, p.with[k])
			}
			t.Run(name, func(t *testing.T) {
				block := nested(p.path, v)
				for k, x := range p.with {
					merge(block, nested(k, x))
				}
				var chartErr error
				if p.top {
					chartErr = renderValues(t, helm, dir, block)
				} else {
					chartErr = renderConfig(t, helm, dir, block)
				}
				fileBlock := map[string]any{"apiVersion": configv1alpha1.APIVersion, "kind": configv1alpha1.Kind}
				for k, x := range block {
					fileBlock[k] = x
				}
				file, err := yaml.Marshal(fileBlock)
				require.NoError(t, err)
				_, _, binaryErr := config.Parse(file)
				assert.Equal(t, binaryErr == nil, chartErr == nil, "binary: %v\nchart: %v", binaryErr, chartErr)
				if ok, known := want[fmt.Sprint(v)]; known {
					assert.Equal(t, ok, binaryErr == nil, "the binary's verdict on %v: %v", v, binaryErr)
					assert.Equal(t, ok, chartErr == nil, "the chart's verdict on %v: %v", v, chartErr)
					if !ok && binaryErr != nil && chartErr != nil {
						// Both name the field: the binary and the chart's
						// checks by its path, the schema by its JSON pointer.
						assert.Contains(t, binaryErr.Error(), p.path)
						chartMsg := chartErr.Error()
						assert.True(t, strings.Contains(chartMsg, p.path) || strings.Contains(chartMsg, strings.ReplaceAll(p.path, ".", "/")),
							"the chart's error names %s: %v", p.path, chartErr)
					}
				}
			})
		}
	}
}

// renderConfig renders the chart with block as config and returns its error.
func renderConfig(t *testing.T, helm, dir string, block map[string]any) error {
	t.Helper()
	return renderValues(t, helm, dir, map[string]any{"config": block})
}

// renderValues renders the chart with values and returns its error.
func renderValues(t *testing.T, helm, dir string, values map[string]any) error {
	t.Helper()
	raw, err := yaml.Marshal(values)
	require.NoError(t, err)
	_, err = RenderWith(helm, dir, "trainguard", "trainguard-system", "-f", valuesFile(t, raw), "--show-only", "templates/configmap.yaml")
	return err
}

// valuesFile writes a values file where helm can read it: -f splits its
// argument at commas, which a subtest's temporary directory may hold.
func valuesFile(t *testing.T, content []byte) string {
	t.Helper()
	f, err := os.CreateTemp("", "trainguard-values-*.yaml")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(f.Name()) })
	_, err = f.Write(content)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return f.Name()
}

// nested turns "a.b" and v into {a: {b: v}}.
func nested(path string, v any) map[string]any {
	keys := strings.Split(path, ".")
	out := map[string]any{keys[len(keys)-1]: v}
	for i := len(keys) - 2; i >= 0; i-- {
		out = map[string]any{keys[i]: out}
	}
	return out
}

// leaves flattens a decoded YAML mapping to dotted paths; lists and the
// mutators map are leaves.
func leaves(prefix string, m map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		key := strings.TrimPrefix(prefix+"."+k, ".")
		if sub, ok := v.(map[string]any); ok && key != "mutators" {
			for kk, vv := range leaves(key, sub) {
				out[kk] = vv
			}
			continue
		}
		out[key] = v
	}
	return out
}

// configFields lists the dotted json paths of t's leaf fields.
func configFields(prefix string, t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if strings.Contains(opts, "inline") {
			out = append(out, configFields(prefix, ft)...)
			continue
		}
		key := strings.TrimPrefix(prefix+"."+name, ".")
		if ft.Kind() == reflect.Struct && ft.PkgPath() == reflect.TypeOf(configv1alpha1.Configuration{}).PkgPath() {
			out = append(out, configFields(key, ft)...)
			continue
		}
		out = append(out, key)
	}
	sort.Strings(out)
	return out
}

// sameValue compares a value set through values with the binary's:
// durations by length (the binary prints 5m0s for 5m), numbers by value.
func sameValue(want, got any) bool {
	if ws, ok := want.(string); ok {
		if gs, ok := got.(string); ok {
			wd, errW := time.ParseDuration(ws)
			gd, errG := time.ParseDuration(gs)
			if errW == nil && errG == nil {
				return wd == gd
			}
		}
	}
	return reflect.DeepEqual(want, got)
}

// buildTrainguard builds the binary the chart runs, once per test.
func buildTrainguard(t *testing.T) string {
	t.Helper()
	root, err := RepoRoot()
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "trainguard")
	build := exec.Command("go", "build", "-o", bin, "./cmd/trainguard")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building trainguard: %s", out)
	return bin
}
