package validators

import (
	"github.com/trainguard/trainguard/internal/testing/builders"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"

	configv1alpha1 "github.com/trainguard/trainguard/internal/config/v1alpha1"
	kubeflowv1 "github.com/trainguard/trainguard/internal/foundations/apis/kubeflow/v1"
	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func kubeflowGVK() schema.GroupVersionKind { return kubeflowv1.GroupVersion.WithKind("PyTorchJob") }

func TestHandles(t *testing.T) {
	assert.True(t, New(nil).Handles(kubeflowGVK()))
	assert.True(t, New(nil).Handles(schema.GroupVersionKind{Group: "training.kubedl.io", Version: "v1alpha1", Kind: "PyTorchJob"}))
	assert.True(t, New(nil).Handles(schema.GroupVersionKind{Version: "v1", Kind: "Pod"}))
	assert.True(t, New(nil).Handles(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}))
	assert.False(t, New(nil).Handles(schema.GroupVersionKind{Group: "kubeflow.org", Version: "v1", Kind: "TFJob"}))
	assert.False(t, New(nil).Handles(schema.GroupVersionKind{Group: "kubeflow.org", Version: "v2", Kind: "PyTorchJob"}))
}

func TestUnhandledKindPasses(t *testing.T) {
	res, err := New(nil).Validate(Object{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Raw: []byte("not json")})
	require.NoError(t, err)
	assert.Empty(t, res.Errors)
	assert.Empty(t, res.Warnings)
}

func TestStatusSubresourcePasses(t *testing.T) {
	obj := object(job().WithElastic(3, 1))
	obj.SubResource = "status"
	res, err := New(nil).Validate(obj)
	require.NoError(t, err)
	assert.Empty(t, res.Errors)
}

func TestDecodeErrors(t *testing.T) {
	for name, raw := range map[string]string{
		"empty":        "",
		"not json":     "apiVersion: v1",
		"wrong type":   `{"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":"two"}}}}`,
		"int overflow": `{"spec":{"elasticPolicy":{"minReplicas":4294967296}}}`,
		"array":        `[1,2]`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(nil).Validate(Object{GVK: kubeflowGVK(), Raw: []byte(raw)})
			assert.Error(t, err)
		})
	}
}

// TestDecodeIsCaseSensitive: the API server ignores `Replicas`, so must we.
func TestDecodeIsCaseSensitive(t *testing.T) {
	raw := `{"metadata":{"name":"t"},"spec":{"pytorchReplicaSpecs":{"Worker":{"Replicas":0,"template":{"spec":{"containers":[{"name":"pytorch","image":"i"}]}}}}}}`
	res := validate(t, Object{GVK: kubeflowGVK(), Raw: []byte(raw)})
	assert.Empty(t, res.Errors)
}

// TestOddInputsDoNotPanic covers nil maps, null replica specs and missing specs.
func TestOddInputsDoNotPanic(t *testing.T) {
	cases := map[string]string{
		"null":              `null`,
		"empty object":      `{}`,
		"null spec":         `{"spec":null}`,
		"null replica":      `{"metadata":{"name":"t"},"spec":{"pytorchReplicaSpecs":{"Worker":null,"Master":null},"elasticPolicy":{"standalone":true,"metrics":[{}]}}}`,
		"null elastic":      `{"metadata":{"name":"t"},"spec":{"elasticPolicy":null}}`,
		"empty elastic":     `{"metadata":{"name":"t"},"spec":{"elasticPolicy":{}}}`,
		"null annotations":  `{"metadata":{"name":"t","annotations":null,"labels":null}}`,
		"null nproc":        `{"spec":{"nprocPerNode":null,"elasticPolicy":{"nProcPerNode":null}}}`,
		"no containers pod": `{"metadata":{"name":"p"},"spec":{"containers":null}}`,
	}
	gvks := []schema.GroupVersionKind{
		kubeflowGVK(),
		{Group: "training.kubedl.io", Version: "v1alpha1", Kind: "PyTorchJob"},
		{Version: "v1", Kind: "Pod"},
		{Version: "v1", Kind: "Namespace"},
	}
	for name, raw := range cases {
		for _, gvk := range gvks {
			t.Run(name+"/"+gvk.Group+gvk.Kind, func(t *testing.T) {
				assert.NotPanics(t, func() {
					_, _ = New(nil).Validate(Object{GVK: gvk, Raw: []byte(raw), OldRaw: []byte(raw)})
					_, _ = New(nil).Validate(Object{GVK: gvk, Raw: []byte(raw)})
				})
			})
		}
	}
}

func TestNullReplicaSpecIsRefused(t *testing.T) {
	raw := `{"metadata":{"name":"t"},"spec":{"pytorchReplicaSpecs":{"Worker":null}}}`
	res := validate(t, Object{GVK: kubeflowGVK(), Raw: []byte(raw)})
	assert.Equal(t, []string{"spec.pytorchReplicaSpecs[Worker].template.spec.containers"}, paths(res.Errors))
}

func TestUpdate(t *testing.T) {
	invalidOld := job().WithElastic(2, 4).WithWorker(1).WithAnnotation(contract.AnnotationGPULimit, "99")
	cases := []struct {
		name string
		old  *builders.KubeflowJobWrapper
		new  *builders.KubeflowJobWrapper
		errs []string
	}{
		{name: "valid to valid", old: job(), new: job().WithWorker(2), errs: []string{}},
		{name: "valid to invalid", old: job(), new: job().WithWorker(0), errs: []string{"spec.pytorchReplicaSpecs[Worker].replicas"}},
		{name: "already invalid, unrelated change", old: invalidOld,
			new: job().WithElastic(2, 4).WithWorker(1).WithAnnotation(contract.AnnotationGPULimit, "99").WithLabel("team", "a"), errs: []string{}},
		{name: "already invalid, new error added", old: invalidOld,
			new: job().WithElastic(2, 4).WithWorker(1).WithAnnotation(contract.AnnotationGPULimit, "99").WithNproc("x"), errs: []string{"spec.nprocPerNode"}},
		{name: "already invalid value changed to another invalid value", old: invalidOld,
			new: job().WithElastic(2, 4).WithWorker(1).WithAnnotation(contract.AnnotationGPULimit, "100"), errs: []string{"metadata.annotations[trainguard.io/gpu-limit]"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := object(tc.new)
			obj.OldRaw = object(tc.old).Raw
			res := validate(t, obj)
			assert.Equal(t, tc.errs, paths(res.Errors))
		})
	}
}

func TestUpdateWithUndecodableOld(t *testing.T) {
	obj := object(job().WithWorker(0))
	obj.OldRaw = []byte("{")
	res := validate(t, obj)
	assert.Equal(t, []string{"spec.pytorchReplicaSpecs[Worker].replicas"}, paths(res.Errors))
}

func TestNewNilConfigUsesDefaults(t *testing.T) {
	v := New(nil)
	require.NotNil(t, v.Config)
	assert.Equal(t, int32(configv1alpha1.DefaultTaskDPort), *v.Config.TaskD.Port)
	// A zero Validator must not panic either.
	_, err := (&Validator{}).Validate(object(pod()))
	assert.NoError(t, err)
}
