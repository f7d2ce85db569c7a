package validators

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainguard/trainguard/internal/testing/builders"
)

// The fixtures come from internal/testing/builders; these name the
// defaults this suite starts from.

func job() *builders.KubeflowJobWrapper { return builders.MakeKubeflowJob("ml", "train") }

func kubedlJob() *builders.KubeDLJobWrapper { return builders.MakeKubeDLJob("elastic-job", "resnet") }

func pod() *builders.PodWrapper { return builders.MakePod("ml", "train-worker-0") }

// object is a fixture as the validating webhook receives it.
func object(w interface {
	GVK() schema.GroupVersionKind
	JSON() []byte
}) Object {
	return Object{GVK: w.GVK(), Raw: w.JSON()}
}

// updatedFrom makes obj an UPDATE of old.
func updatedFrom(obj Object, old *builders.KubeflowJobWrapper) Object {
	obj.OldRaw = old.JSON()
	return obj
}

func namespaceObject(annotations, labels map[string]string) Object {
	ns := &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: "ml", Annotations: annotations, Labels: labels},
	}
	return Object{GVK: corev1.SchemeGroupVersion.WithKind("Namespace"), Raw: builders.MustJSON(ns)}
}

// paths lists the field paths of errs, in order.
func paths(errs field.ErrorList) []string {
	out := []string{}
	for _, e := range errs {
		out = append(out, e.Field)
	}
	return out
}

// validate runs the default validator and fails the test on a decode error.
func validate(t testing.TB, obj Object) Result {
	t.Helper()
	res, err := New(nil).Validate(obj)
	require.NoError(t, err)
	return res
}
