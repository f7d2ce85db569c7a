package webhook

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestCachedNamespacesFallsBackOnMiss covers a namespace the informer has
// not seen yet (created a moment before the job, as kubectl apply -f dir/
// does): the live read finds it, so the job is not skipped.
func TestCachedNamespacesFallsBackOnMiss(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh", Annotations: map[string]string{"trainguard.io/inject": "enabled"}}}
	emptyCache := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	live := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(ns).Build()

	ann, found, err := CachedNamespaces(emptyCache, live)(context.Background(), "fresh")
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, "enabled", ann["trainguard.io/inject"])

	_, found, err = CachedNamespaces(emptyCache, live)(context.Background(), "missing")
	require.NoError(t, err)
	assert.False(t, found)

	_, found, err = CachedNamespaces(emptyCache, nil)(context.Background(), "fresh")
	require.NoError(t, err)
	assert.False(t, found, "without a live reader a cache miss is a miss")
}
