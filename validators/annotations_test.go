package validators

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/foundations/contract"

	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
)

// annotationRules lists one valid and one invalid value per annotation (issue 3 §3).
func annotationRules() []struct{ key, good, bad string } {
	return []struct{ key, good, bad string }{
		{"trainguard.io/recover-strategy", "recover,dump", "recover,,dump"},
		{"trainguard.io/recover-strategy", "retry,recover-in-place,elastic-training,exit", "recover,recover"},
		{"trainguard.io/recover-strategy", "recover", "migrate"},
		{"recover-strategy", "recover-in-place", "restart"},
		{"trainguard.io/fault-scheduling", "force", "soft"},
		{"trainguard.io/checkpoint-claim", "ckpt-pvc", "Ckpt_PVC"},
		{"trainguard.io/checkpoint-path", "/checkpoint", "checkpoint"},
		{"trainguard.io/checkpoint-path", "/mnt/ckpt", "/mnt/../ckpt"},
		{"trainguard.io/checkpoint-path", "/data/ckpt", "/"},
		{"trainguard.io/checkpoint-path", "/srv/ckpt", "/proc/ckpt"},
		{"trainguard.io/checkpoint-path", "/system", "/sys"},
		{"trainguard.io/checkpoint-path", "/devices", "/dev/shm"},
		{"trainguard.io/checkpoint-path", "/var/run/ckpt", "/var/run/secrets/ckpt"},
		{"trainguard.io/prestop-timeout", "90s", "-5s"},
		{"trainguard.io/checkpoint-interval", "10m", "5s"},
		{"trainguard.io/checkpoint-interval", "0s", "25h"},
		{"trainguard.io/checkpoint-interval", "24h", "often"},
		{"trainguard.io/prestop-timeout", "1h", "61m"},
		{"trainguard.io/prestop-timeout", "5m", "five minutes"},
		{"trainguard.io/gpu-limit", "0", "65"},
		{"trainguard.io/gpu-limit", "64", "one"},
		{"trainguard.io/taskd", "disabled", "off"},
		{"trainguard.io/inject", "enabled", "yes"},
		{"trainguard.io/max-reschedules", "3", "-1"},
		{"trainguard.io/require-durable-checkpoints", "false", "yes"},
	}
}

// TestAnnotationRules checks every annotation rule on each place an
// annotation can be: a job, a job's pod template, a pod and a namespace.
func TestAnnotationRules(t *testing.T) {
	places := []struct {
		name string
		path string
		obj  func(k, v string) Object
	}{
		{"job", "metadata.annotations", func(k, v string) Object { return object(job().WithAnnotation(k, v)) }},
		{"template", "spec.pytorchReplicaSpecs[Worker].template.metadata.annotations", func(k, v string) Object {
			return object(job().WithReplica("Worker", func(rs *kubeflowv1.ReplicaSpec) { rs.Template.Annotations = map[string]string{k: v} }))
		}},
		{"kubedl job", "metadata.annotations", func(k, v string) Object { return object(kubedlJob().WithAnnotation(k, v)) }},
		{"pod", "metadata.annotations", func(k, v string) Object { return object(pod().WithAnnotation(k, v)) }},
		{"namespace", "metadata.annotations", func(k, v string) Object { return namespaceObject(map[string]string{k: v}, nil) }},
	}
	var cases []ruleCase
	for _, place := range places {
		for _, r := range annotationRules() {
			cases = append(cases,
				ruleCase{name: place.name + "/" + r.key + "=" + r.good, obj: place.obj(r.key, r.good)},
				ruleCase{name: place.name + "/" + r.key + "=" + r.bad, obj: place.obj(r.key, r.bad), errs: []string{place.path + "[" + r.key + "]"}},
			)
		}
	}
	runRuleCases(t, cases)
}

func TestFaultSchedulingLabel(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{name: "job label grace", obj: object(job().WithLabel("fault-scheduling", "grace"))},
		{name: "job label bad", obj: object(job().WithLabel("fault-scheduling", "soon")), errs: []string{"metadata.labels[fault-scheduling]"}},
		{name: "template label bad", obj: object(job().WithReplica("Master", func(rs *kubeflowv1.ReplicaSpec) {
			rs.Template.Labels = map[string]string{"fault-scheduling": "Grace"}
		})), errs: []string{"spec.pytorchReplicaSpecs[Master].template.metadata.labels[fault-scheduling]"}},
		{name: "pod label off", obj: object(pod().With(func(p *corev1.Pod) { p.Labels = map[string]string{"fault-scheduling": "off"} }))},
		{name: "pod label bad", obj: object(pod().With(func(p *corev1.Pod) { p.Labels = map[string]string{"fault-scheduling": ""} })),
			errs: []string{"metadata.labels[fault-scheduling]"}},
		{name: "namespace label bad", obj: namespaceObject(nil, map[string]string{"fault-scheduling": "x"}), errs: []string{"metadata.labels[fault-scheduling]"}},
	})
}

func TestValidateNamespace(t *testing.T) {
	ns := &corev1.Namespace{}
	ns.Annotations = map[string]string{"trainguard.io/inject": "enabled", "trainguard.io/gpu-limit": "100", "unrelated": "x"}
	assert.Equal(t, []string{"metadata.annotations[trainguard.io/gpu-limit]"}, paths(ValidateNamespace(ns)))
	assert.Empty(t, ValidateNamespace(nil))
	assert.Empty(t, ValidateNamespace(&corev1.Namespace{}))
}

// TestUnknownTrainguardKeys: a trainguard.io/ key nobody reads is a typo
// that would silently leave the default in place; it is refused with the
// nearest known key, on objects, templates and namespaces alike. Other
// prefixes are none of trainguard's business.
func TestUnknownTrainguardKeys(t *testing.T) {
	meta := func(ann, labels map[string]string) *metav1.ObjectMeta {
		return &metav1.ObjectMeta{Annotations: ann, Labels: labels}
	}
	errs := contract.ValidateMetadata(meta(map[string]string{
		"trainguard.io/gpu-limt": "2", "trainguard.io/checkpoint-claim": "ckpt", "example.com/gpu-limt": "x", "trainguard.io/zzzzzzzz": "1",
	}, map[string]string{"trainguard.io/manged": "true", "trainguard.io/managed": "true"}), field.NewPath("metadata"))
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	assert.Equal(t, []string{
		`metadata.annotations[trainguard.io/gpu-limt]: Invalid value: "trainguard.io/gpu-limt": unknown trainguard.io/ annotation; did you mean trainguard.io/gpu-limit?`,
		`metadata.annotations[trainguard.io/zzzzzzzz]: Invalid value: "trainguard.io/zzzzzzzz": unknown trainguard.io/ annotation; the known ones are ` + strings.Join(contract.KnownAnnotations(), ", "),
		`metadata.labels[trainguard.io/manged]: Invalid value: "trainguard.io/manged": unknown trainguard.io/ label; did you mean trainguard.io/managed?`,
	}, got)
	ns := &corev1.Namespace{ObjectMeta: *meta(map[string]string{"trainguard.io/checkpoint-clam": "ckpt"}, nil)}
	if errs := ValidateNamespace(ns); assert.Len(t, errs, 1) {
		assert.Contains(t, errs[0].Error(), "did you mean trainguard.io/checkpoint-claim?")
	}
}
