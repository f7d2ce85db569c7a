package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainguard/trainguard/internal/foundations/contract"
)

func TestInvalidElasticPolicyIsRefusedWithFieldPath(t *testing.T) {
	ns := namespace(t, true, nil)
	err := env.c.Create(context.Background(), job(t, ns, "broken", invalidElasticSpec))
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "an Invalid status, got %v", err)
	msg := err.Error()
	t.Logf("API server said: %s", msg)
	assert.Contains(t, msg, "spec.elasticPolicy.maxReplicas")
	assert.Contains(t, msg, "spec.elasticPolicy.rdzvHost")
	assert.Contains(t, msg, "admission webhook \"pytorchjobs.validate.trainguard.io\" denied the request")
}

func TestWarningsReachTheClient(t *testing.T) {
	c, rec := warningClient(t)
	ns := namespace(t, true, nil)
	// An elastic job with no checkpoint volume is legal but risky.
	require.NoError(t, c.Create(context.Background(), job(t, ns, "elastic", elasticSpec)))
	messages := rec.Take()
	assert.Condition(t, func() bool {
		for _, m := range messages {
			if strings.Contains(m, "checkpoints are not durable") {
				return true
			}
		}
		return false
	}, "warnings received: %q", messages)
}

func TestNamespaceAnnotationWithBadValueIsRefused(t *testing.T) {
	ctx := context.Background()
	bad := &corev1.Namespace{}
	bad.Name = "it-bad-annotation"
	bad.Annotations = map[string]string{contract.AnnotationGPULimit: "lots"}
	err := env.c.Create(ctx, bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "metadata.annotations[trainguard.io/gpu-limit]")

	ns := namespace(t, true, nil)
	var obj corev1.Namespace
	require.NoError(t, env.c.Get(ctx, client.ObjectKey{Name: ns}, &obj))
	obj.Annotations[contract.AnnotationPreStopTimeout] = "forever"
	err = env.c.Update(ctx, &obj)
	require.Error(t, err, "the moment a bad annotation is set, it is refused")
	assert.Contains(t, err.Error(), "trainguard.io/prestop-timeout")
}
