package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/internal/foundations/typecheck"
	"github.com/trainguard/trainguard/internal/jobs"
	"github.com/trainguard/trainguard/validators"
	"github.com/trainguard/trainguard/webhook"
)

const validateLong = `Validate reads one or more YAML documents and checks them offline, first as
the API server and 'kubectl apply --validate=strict' would (apiVersion and
kind, every value of the wrong type, every integer overflow, unknown fields,
duplicate keys, with their field paths; a kubeflow.org PyTorchJob and the
Kubeflow Trainer kinds also against their real CRD schemas: undeclared
fields, required fields, enums and bounds), then with the same rules the
validating webhook applies:

  - kubeflow.org/v1 PyTorchJob: everything the training operator's webhook
    checks (a Master must set replicas: 1, as kubeflow requires), plus the
    elastic policy (min/max replicas, Worker count within
    them, rendezvous backend, host, port and config, maxRestarts, standalone,
    nprocPerNode);
  - training.kubedl.io/v1alpha1 PyTorchJob: enableElastic, elasticPolicy,
    rdzvEndpoint, min/max replicas, nProcPerNode;
  - trainer.kubeflow.org/v1alpha1 TrainJob, TrainingRuntime and
    ClusterTrainingRuntime (Kubeflow Trainer v2): everything Trainer's own
    webhook and CRD refuse, plus the torch elastic policy (minNodes,
    maxNodes, maxRestarts, metrics); a TrainJob is checked against its
    runtime when the runtime is in the same input. These are the rules of
    Trainer v2.0's API. The cluster's release is not known offline, so the
    object is checked against the CRDs of v2.0.0 and v2.3.0: what both
    refuse (spec.trainer.numNode) is an error, what only one refuses (v2.3's
    runtimePatches; mlPolicy.torch.elasticPolicy and numProcPerNode,
    removed in v2.2; a TrainJob's podSpecOverrides, or a string
    spec.trainer.numProcPerNode) a warning naming the release;
  - trainguard.io/ and MindCluster annotations and the fault-scheduling label
    on jobs, pod templates, Pods and Namespaces (an unknown trainguard.io/
    key is refused with the nearest known one);
  - cross-field checks against the effective policy (TaskD port, GPU limit
    versus nprocPerNode, checkpoints on storage that dies with the pod:
    a warning, an error where trainguard.io/require-durable-checkpoints is
    "true").

Documents of other kinds pass once well-formed. The policy comes from
--config (the file 'trainguard serve' reads), from the annotations of a
Namespace anywhere in the input, and from each object's own annotations.

Output: one line per field error on stdout,
  <Kind>/<namespace>/<name>: <field path>: <message>
and warnings on stderr.

Exit status: 0 when every document is valid (warnings allowed), 1 when any
document is invalid, 2 on unreadable input (missing, empty or only
comments, binary) or bad usage.`

const validateExample = `  trainguard validate -f job.yaml
  kubectl get pytorchjobs -A -o yaml | trainguard validate -f -
  trainguard validate -f jobs.yaml --config /etc/trainguard/config.yaml`

// newValidateCmd is `trainguard validate`, the offline validating webhook.
func newValidateCmd() *cobra.Command {
	var files inputFlags
	var configPath string
	cmd := &cobra.Command{
		Use:     "validate -f FILE [-f FILE|DIR ...] [-R]",
		Short:   "Validate YAML documents offline as the validating webhook would",
		Long:    validateLong,
		Example: validateExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runValidate(cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), files, configPath)
		},
	}
	files.bind(cmd.Flags(), "file of YAML documents to validate")
	cmd.Flags().StringVar(&configPath, "config", "", "policy file (the format 'trainguard serve --config' reads); defaults apply without it")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// runValidate validates every document of every file. A plain error means
// unreadable input or bad usage (exit 2); invalid documents exit 1.
func runValidate(stdin io.Reader, stdout, stderr io.Writer, files inputFlags, configPath string) error {
	cfg, err := loadConfig(configPath, stderr)
	if err != nil {
		return fmt.Errorf("loading --config: %w", err)
	}
	in, err := files.read(stdin)
	if err != nil {
		return err
	}
	invalid := 0
	for _, report := range newChecker(cfg, in).all() {
		if err := printReport(stdout, stderr, report); err != nil {
			return err
		}
		if len(report.errors) > 0 {
			invalid++
		}
	}
	if invalid > 0 {
		return exitWith(1, "")
	}
	return nil
}

// printReport writes one line per error to stdout and per warning to stderr.
func printReport(stdout, stderr io.Writer, report documentReport) error {
	for _, w := range report.warnings {
		if _, err := fmt.Fprintf(stderr, "%s: warning: %s\n", report.name, w); err != nil {
			return fmt.Errorf("writing warnings: %w", err)
		}
	}
	for _, line := range report.errors {
		if _, err := fmt.Fprintf(stdout, "%s: %s\n", report.name, line); err != nil {
			return fmt.Errorf("writing errors: %w", err)
		}
	}
	return nil
}

// documentReport is what one object produced.
type documentReport struct {
	name     string
	errors   []string // "<field path>: <message>", or why the object cannot be read
	warnings []string
}

// checker validates the documents of one input, as `validate` and, before
// mutating anything, `inject` do: both see the same Namespaces and runtimes.
//
// Online the validating webhook sees each object as the mutating webhook
// left it, so the checker judges what inject would write: a bare training
// Pod gets its cross-field checks (TaskD port, durable checkpoints) as the
// injected Pod it becomes, not as the Pod the user wrote.
type checker struct {
	v          *validators.Validator
	in         *input
	namespaces map[string]map[string]string
	off        *webhook.Offline
}

func newChecker(cfg *configv1alpha1.Configuration, in *input) *checker {
	namespaces := namespacesIn(in.docs)
	off := webhook.NewOffline(cfg)
	off.SetNamespaces(namespaces)
	v := validators.New(cfg)
	v.Runtimes = runtimesIn(in.docs).Lookup
	v.TrainJobs = off.TrainJobAnnotations
	return &checker{v: v, in: in, namespaces: namespaces, off: off}
}

// all checks every document and returns one report per object.
func (c *checker) all() []documentReport {
	var reports []documentReport
	for i, doc := range c.in.docs {
		if isEmptyDocument(doc) {
			continue
		}
		reports = append(reports, c.document(c.in.docName(i), doc)...)
	}
	return reports
}

// document checks one YAML document. A document that is not a
// Kubernetes object, or not a well-typed one of its kind, is invalid. A v1
// List (what kubectl get -o yaml prints) gives one report per item.
func (c *checker) document(name string, doc []byte) []documentReport {
	raw, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return []documentReport{{name: name, errors: []string{fmt.Sprintf("not valid YAML: %v", err)}}}
	}
	reports := c.object(name, raw)
	if dups := duplicateKeys(doc); len(dups) > 0 && len(reports) > 0 {
		reports[0].errors = append(dups, reports[0].errors...)
	}
	return reports
}

// duplicateKeys refuses a mapping that sets a key twice (replicas: 2 and
// replicas: 4 in one Worker): the API server's strict decoding refuses it,
// while a lenient decoder keeps the last value and the user never learns
// which one counted.
func duplicateKeys(doc []byte) []string {
	_, err := yaml.YAMLToJSONStrict(doc)
	if err == nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if strings.Contains(line, "already set in map") {
			out = append(out, "duplicate key: "+line+"; the API server refuses an object that sets a field twice: keep one")
		}
	}
	return out
}

// object checks one JSON object; fallback names it when it has no name.
func (c *checker) object(fallback string, raw []byte) []documentReport {
	report := documentReport{name: fallback}
	generic, err := typecheck.DecodeJSON(raw)
	obj, isObject := generic.(map[string]any)
	if err != nil || !isObject {
		report.errors = append(report.errors, fmt.Sprintf("not a Kubernetes object: the document is %s, not a mapping with apiVersion, kind and metadata", typecheck.ValueString(generic)))
		return []documentReport{report}
	}
	gvk, problems, warnings := structuralProblems(obj)
	report.name = documentName(gvk.Kind, obj, fallback)
	report.warnings = warnings
	if len(problems) > 0 {
		// The rules need a well-typed object, but the object's own
		// trainguard.io/ annotations and labels can be judged already, so
		// one run names every mistake, not the typo after the type error.
		report.errors = slices.Concat(problems, metadataRuleErrors(obj))
		return []documentReport{report}
	}
	var h jobs.Header
	if err := json.Unmarshal(raw, &h); err != nil {
		report.errors = append(report.errors, fmt.Sprintf("not a Kubernetes object: %v", err))
		return []documentReport{report}
	}
	if h.IsList() {
		return c.list(report.name, raw)
	}
	return []documentReport{c.rules(report, h, raw)}
}

// metadataRuleErrors are the annotation and label rules on a malformed
// object's metadata, when the metadata itself is well formed.
func metadataRuleErrors(obj map[string]any) []string {
	raw, err := json.Marshal(obj["metadata"])
	var meta metav1.ObjectMeta
	if err != nil || json.Unmarshal(raw, &meta) != nil {
		return nil
	}
	var out []string
	for _, e := range contract.ValidateMetadata(&meta, field.NewPath("metadata")) {
		out = append(out, fmt.Sprintf("%s: %s", e.Field, e.ErrorBody()))
	}
	return out
}

// rules runs trainguard's validating rules on a well-formed object.
func (c *checker) rules(report documentReport, h jobs.Header, raw []byte) documentReport {
	if ns := h.Metadata.Namespace; contract.OptedOut(c.namespaces[ns]) && h.GVK() != namespaceGVK() {
		// The webhooks never see it, and inject leaves it unchanged.
		report.warnings = append(report.warnings, fmt.Sprintf("trainguard's rules not applied: namespace %s is annotated %s=%s", ns, contract.AnnotationInject, contract.InjectDisabled))
		return report
	}
	if reason := unhandled(c.off, h.GVK()); reason != "" {
		report.warnings = append(report.warnings, webhook.Unchanged(reason))
	}
	injected, injectWarnings, err := c.off.InjectObject(context.Background(), raw)
	if err != nil {
		report.errors = append(report.errors, err.Error())
		return report
	}
	report.warnings = append(report.warnings, injectWarnings...)
	judged := raw
	if injected != nil {
		judged = injected
	}
	res, err := c.v.Validate(validators.Object{GVK: h.GVK(), Raw: judged, NamespaceAnnotations: c.namespaces[h.Metadata.Namespace]})
	if err != nil {
		report.errors = append(report.errors, err.Error())
		return report
	}
	audit := c.off.Audited(h.Metadata.Namespace) && h.GVK() != namespaceGVK()
	for _, e := range res.Errors {
		line := fmt.Sprintf("%s: %s", e.Field, e.ErrorBody())
		if audit {
			// Online audit mode admits it with this warning.
			report.warnings = append(report.warnings, webhook.AuditRefusal(line))
			continue
		}
		report.errors = append(report.errors, line)
	}
	// Offline the cluster's Trainer release is unknown: fields only some
	// releases have are warned about (the webhook sees them pruned).
	report.warnings = append(report.warnings, res.Warnings...)
	explained := validators.TrainerVersionWarnings(h.GVK(), raw)
	// A field the CRDs disagree on that trainer_versions.go knows gets
	// only its words, which say what to write instead.
	report.warnings = slices.DeleteFunc(report.warnings, func(w string) bool {
		return slices.ContainsFunc(explained, func(e string) bool { return linePath(e) == linePath(w) })
	})
	report.warnings = append(report.warnings, explained...)
	return report
}

// unhandled says why an object of a kind the webhooks are never sent is
// left unchanged, or "" for a kind they handle (they say why themselves).
func unhandled(off *webhook.Offline, gvk schema.GroupVersionKind) string {
	switch {
	case gvk == namespaceGVK():
		return "a Namespace is not injected; its " + contract.AnnotationInject + " and policy annotations apply to the objects in it"
	case !off.Handles(gvk):
		return "trainguard does not handle " + jobs.String(gvk)
	}
	return ""
}

// list checks each item of a v1 List as its own document.
func (c *checker) list(listName string, raw []byte) []documentReport {
	items, err := jobs.ListItems(raw)
	if err != nil {
		return []documentReport{{name: listName, errors: []string{err.Error()}}}
	}
	var reports []documentReport
	for i, item := range items {
		reports = append(reports, c.object(fmt.Sprintf("%s item %d", listName, i), item)...)
	}
	return reports
}

// documentName is Kind/namespace/name, Kind/name without a namespace, and
// names the position for objects with neither name nor generateName.
func documentName(kind string, obj map[string]any, fallback string) string {
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if name == "" {
		name, _ = meta["generateName"].(string)
	}
	if kind == "" {
		return fallback
	}
	if name == "" {
		return fmt.Sprintf("%s (%s)", kind, fallback)
	}
	if ns, _ := meta["namespace"].(string); ns != "" {
		return kind + "/" + ns + "/" + name
	}
	return kind + "/" + name
}

func namespaceGVK() schema.GroupVersionKind { return corev1.SchemeGroupVersion.WithKind("Namespace") }
