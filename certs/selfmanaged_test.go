package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

const (
	testNS       = "trainguard-system"
	testSecret   = "trainguard-tls"
	testService  = "trainguard"
	testConfig   = "trainguard"
	testValidity = 90 * 24 * time.Hour
)

// clock is a settable time source shared by the replicas of a test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newClock() *clock { return &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func webhookConfigs() []client.Object {
	entry := func(name string) admissionregistrationv1.WebhookClientConfig {
		path := "/" + name
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: testNS, Name: testService, Path: &path}}
	}
	none := admissionregistrationv1.SideEffectClassNone
	return []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: testConfig},
			Webhooks: []admissionregistrationv1.MutatingWebhook{
				{Name: "pods.mutate.trainguard.io", ClientConfig: entry("mutate-v1-pod"), SideEffects: &none, AdmissionReviewVersions: []string{"v1"}},
				{Name: "namespaces.mutate.trainguard.io", ClientConfig: entry("mutate-v1-namespace"), SideEffects: &none, AdmissionReviewVersions: []string{"v1"}},
			},
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: testConfig},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{
				{Name: "pods.validate.trainguard.io", ClientConfig: entry("validate-v1-pod"), SideEffects: &none, AdmissionReviewVersions: []string{"v1"}},
				{Name: "namespaces.validate.trainguard.io", ClientConfig: entry("validate-v1-namespace"), SideEffects: &none, AdmissionReviewVersions: []string{"v1"}},
			},
		},
	}
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	return s
}

func newFakeClient(t *testing.T, funcs *interceptor.Funcs, objs ...client.Object) client.WithWatch {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...)
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	return b.Build()
}

func newReplica(t *testing.T, c client.Client, clk *clock) *SelfManaged {
	t.Helper()
	return NewSelfManaged(c, SelfManagedOptions{
		Namespace: testNS, SecretName: testSecret, ServiceName: testService, WebhookConfigName: testConfig,
		CertDir: t.TempDir(), Validity: testValidity, RefreshInterval: 20 * time.Millisecond, Now: clk.Now,
	})
}

func getSecret(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	sec := &corev1.Secret{}
	require.NoError(t, c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: testSecret}, sec))
	return sec
}

// bundles returns every caBundle of both configurations.
func bundles(t *testing.T, c client.Client) [][]byte {
	t.Helper()
	ctx := context.Background()
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: testConfig}, m))
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: testConfig}, v))
	var out [][]byte
	for _, w := range m.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	require.Len(t, out, 4)
	return out
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, name := range []string{CertFile, KeyFile, CAFile} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		out[name] = data
	}
	return out
}

func certsOf(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	out, err := ParseCertificates(bundle)
	require.NoError(t, err)
	return out
}

// verifies reports whether certPEM chains to bundle for the Service's DNS name at now.
func verifies(t *testing.T, certPEM, bundle []byte, now time.Time) bool {
	t.Helper()
	leaf, err := parseLeaf(certPEM)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(bundle))
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: testService + "." + testNS + ".svc", CurrentTime: now})
	return err == nil
}

func assertFilesMatchSecret(t *testing.T, dir string, sec *corev1.Secret) {
	t.Helper()
	files := readDir(t, dir)
	assert.Equal(t, sec.Data[corev1.TLSCertKey], files[CertFile])
	assert.Equal(t, sec.Data[corev1.TLSPrivateKeyKey], files[KeyFile])
	assert.Equal(t, sec.Data[CAFile], files[CAFile])
	_, err := tls.LoadX509KeyPair(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	assert.NoError(t, err, "written files must form a key pair the webhook server can load")
}

func TestSelfManagedCreatesSecretOnceAndReplicasAgree(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	var creates, alreadyExists int
	// Replica B's first read misses the Secret, as if it looked just before
	// replica A created it: B must then lose the create race and adopt A's.
	var missB bool
	funcs := &interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok && missB {
				missB = false
				return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
			}
			return c.Get(ctx, key, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			err := c.Create(ctx, obj, opts...)
			if apierrors.IsAlreadyExists(err) {
				alreadyExists++
			} else if err == nil {
				creates++
			}
			return err
		},
	}
	c := newFakeClient(t, funcs, webhookConfigs()...)
	a, b := newReplica(t, c, clk), newReplica(t, c, clk)

	require.Error(t, a.ReadyCheck(nil), "not ready before the first sync")
	require.NoError(t, a.Sync(ctx))
	require.NoError(t, a.ReadyCheck(nil))
	missB = true
	require.NoError(t, b.Sync(ctx))
	require.NoError(t, b.ReadyCheck(nil))

	assert.Equal(t, 1, creates, "exactly one replica creates the Secret")
	assert.Equal(t, 1, alreadyExists, "the second replica's create must have raced and lost")
	sec := getSecret(t, c)
	assert.Equal(t, corev1.SecretTypeTLS, sec.Type)
	assert.Equal(t, "1", sec.Annotations[AnnotationGeneration])
	assertFilesMatchSecret(t, a.opts.CertDir, sec)
	assertFilesMatchSecret(t, b.opts.CertDir, sec)

	leaf, err := parseLeaf(sec.Data[corev1.TLSCertKey])
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{
		"trainguard", "trainguard.trainguard-system", "trainguard.trainguard-system.svc",
		"trainguard.trainguard-system.svc.cluster.local",
	}, leaf.DNSNames)
	assert.Equal(t, clk.Now().Add(testValidity), leaf.NotAfter.UTC())

	// Syncing again changes nothing: no rotation, no rewrite.
	before := sec.ResourceVersion
	require.NoError(t, a.Sync(ctx))
	require.NoError(t, b.Sync(ctx))
	assert.Equal(t, before, getSecret(t, c).ResourceVersion)
	assert.Equal(t, 1, creates)
}

func TestSelfManagedInjectsCABundleIntoEveryWebhook(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	c := newFakeClient(t, nil, webhookConfigs()...)
	a := newReplica(t, c, clk)
	require.NoError(t, a.Sync(ctx))

	sec := getSecret(t, c)
	for i, bundle := range bundles(t, c) {
		assert.Equal(t, sec.Data[CAFile], bundle, "webhook entry %d", i)
		assert.True(t, verifies(t, sec.Data[corev1.TLSCertKey], bundle, clk.Now()), "entry %d must trust the serving certificate", i)
	}

	// Someone strips the bundle from one entry: the next pass restores it.
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: testConfig}, v))
	v.Webhooks[1].ClientConfig.CABundle = nil
	require.NoError(t, c.Update(ctx, v))
	require.NoError(t, a.Sync(ctx))
	for i, bundle := range bundles(t, c) {
		assert.Equal(t, sec.Data[CAFile], bundle, "webhook entry %d after repair", i)
	}
}

func TestSelfManagedStartReinjectsRemovedBundle(t *testing.T) {
	clk := newClock()
	c := newFakeClient(t, nil, webhookConfigs()...)
	a := newReplica(t, c, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	require.Eventually(t, func() bool { return a.ReadyCheck(nil) == nil }, 5*time.Second, 10*time.Millisecond)

	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, c.Get(context.Background(), types.NamespacedName{Name: testConfig}, m))
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = nil
	}
	require.NoError(t, c.Update(context.Background(), m))
	want := getSecret(t, c).Data[CAFile]
	require.Eventually(t, func() bool {
		for _, b := range bundles(t, c) {
			if !bytes.Equal(b, want) {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "Start must re-inject a removed caBundle")
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
}

func TestSelfManagedNotReadyUntilBundleInjected(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	c := newFakeClient(t, nil) // Helm has not created the webhook configurations yet.
	a := newReplica(t, c, clk)

	// Prepare only needs the Secret: the files must exist before the webhook
	// server starts, whatever the configurations' state.
	prepCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, a.Prepare(prepCtx))
	assertFilesMatchSecret(t, a.opts.CertDir, getSecret(t, c))
	require.Error(t, a.ReadyCheck(nil), "files alone are not enough: the API server does not trust the CA yet")

	err := a.Sync(ctx)
	require.Error(t, err)
	assert.True(t, apierrors.IsNotFound(errorsCause(err)), "got %v", err)
	require.Error(t, a.ReadyCheck(nil))
	assert.Contains(t, a.ReadyCheck(nil).Error(), "not in place yet")

	for _, o := range webhookConfigs() {
		require.NoError(t, c.Create(ctx, o))
	}
	require.NoError(t, a.Sync(ctx))
	require.NoError(t, a.ReadyCheck(nil))

	// Readiness turns false again once the certificate on disk has expired.
	clk.Advance(testValidity + time.Minute)
	assert.Error(t, a.ReadyCheck(nil))
}

// errorsCause unwraps to the innermost error.
func errorsCause(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

func TestSelfManagedRotationKeepsPreviousCA(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	c := newFakeClient(t, nil, webhookConfigs()...)
	a, b := newReplica(t, c, clk), newReplica(t, c, clk)
	require.NoError(t, a.Sync(ctx))
	require.NoError(t, b.Sync(ctx))
	first := getSecret(t, c)

	// Half-way through its validity, the certificate is kept.
	clk.Advance(testValidity / 2)
	require.NoError(t, a.Sync(ctx))
	assert.Equal(t, first.ResourceVersion, getSecret(t, c).ResourceVersion, "no rotation while more than a third of the validity remains")

	// With less than a third left, the next pass rotates.
	clk.Advance(testValidity / 4)
	require.NoError(t, a.Sync(ctx))
	second := getSecret(t, c)
	assert.Equal(t, "2", second.Annotations[AnnotationGeneration])
	assert.NotEqual(t, first.Data[corev1.TLSCertKey], second.Data[corev1.TLSCertKey])
	assert.NotEqual(t, first.Data[corev1.TLSPrivateKeyKey], second.Data[corev1.TLSPrivateKeyKey])
	// The new certificate is signed by the CA staged at creation, which the
	// first bundle already carried: trusted before it was ever served.
	assert.True(t, verifies(t, second.Data[corev1.TLSCertKey], first.Data[CAFile], clk.Now()),
		"the signer of a rotated certificate must be in the bundle of the generation before")
	assert.Equal(t, first.Data[NextCAFile], certsOfPEM(t, second.Data[CAFile], 1), "the staged CA signs")
	cas := certsOf(t, second.Data[CAFile])
	require.Len(t, cas, 3, "the first CA (unexpired), the signer, and the next one staged")
	assert.Equal(t, certsOf(t, first.Data[CAFile])[0].Raw, cas[0].Raw, "the previous CA stays until it expires")
	assert.Equal(t, second.Data[NextCAFile], certsOfPEM(t, second.Data[CAFile], 2), "a new CA is staged at once")
	assert.NotEqual(t, first.Data[NextCAFile], second.Data[NextCAFile])

	// The API server trusts both: replica B still serves the old certificate.
	for _, bundle := range bundles(t, c) {
		assert.True(t, verifies(t, first.Data[corev1.TLSCertKey], bundle, clk.Now()), "old certificate must stay trusted during rotation")
		assert.True(t, verifies(t, second.Data[corev1.TLSCertKey], bundle, clk.Now()))
	}
	assertFilesMatchSecret(t, a.opts.CertDir, second)
	assert.NotContains(t, readDir(t, a.opts.CertDir), NextCAKeyFile, "the staged CA's key never leaves the Secret")
	assert.Equal(t, first.Data[corev1.TLSCertKey], readDir(t, b.opts.CertDir)[CertFile], "B has not synced yet")
	require.NoError(t, b.Sync(ctx))
	assertFilesMatchSecret(t, b.opts.CertDir, second)

	// A forced rotation drops no CA that has not expired.
	require.NoError(t, b.Rotate(ctx))
	third := getSecret(t, c)
	assert.Equal(t, "3", third.Annotations[AnnotationGeneration])
	assert.True(t, verifies(t, third.Data[corev1.TLSCertKey], second.Data[CAFile], clk.Now()))
	require.Len(t, certsOf(t, third.Data[CAFile]), 4)
	assert.True(t, verifies(t, first.Data[corev1.TLSCertKey], third.Data[CAFile], clk.Now()))

	// Once the first CAs have expired, the next pass (due: the certificate
	// has expired too) drops them from the bundle.
	clk.Advance(2 * testValidity)
	require.NoError(t, a.Sync(ctx))
	fourth := getSecret(t, c)
	for _, ca := range certsOf(t, fourth.Data[CAFile]) {
		assert.True(t, clk.Now().Before(ca.NotAfter), "expired CA %x left in the bundle", ca.SerialNumber)
		assert.False(t, ca.Equal(cas[0]), "the first CA has expired and must be gone")
	}
	assert.True(t, verifies(t, fourth.Data[corev1.TLSCertKey], fourth.Data[CAFile], clk.Now()))
}

// certsOfPEM returns the i-th certificate of a bundle, PEM encoded.
func certsOfPEM(t *testing.T, bundle []byte, i int) []byte {
	t.Helper()
	cs := certsOf(t, bundle)
	require.Greater(t, len(cs), i)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cs[i].Raw})
}

func TestSelfManagedRotationConflictAdoptsOtherReplicasResult(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	var other *SelfManaged
	var conflicts int
	funcs := &interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, ok := obj.(*corev1.Secret); ok && other != nil {
				// The other replica rotates between our read and our write.
				o := other
				other = nil
				if err := o.Rotate(ctx); err != nil {
					return err
				}
			}
			err := c.Update(ctx, obj, opts...)
			if apierrors.IsConflict(err) {
				conflicts++
			}
			return err
		},
	}
	c := newFakeClient(t, funcs, webhookConfigs()...)
	a, b := newReplica(t, c, clk), newReplica(t, c, clk)
	require.NoError(t, a.Sync(ctx))
	require.NoError(t, b.Sync(ctx))

	clk.Advance(testValidity * 3 / 4)
	other = b
	require.NoError(t, a.Sync(ctx))

	assert.Equal(t, 1, conflicts, "A's stale update must have conflicted")
	sec := getSecret(t, c)
	assert.Equal(t, "2", sec.Annotations[AnnotationGeneration], "one rotation, not two")
	assertFilesMatchSecret(t, a.opts.CertDir, sec)
	assertFilesMatchSecret(t, b.opts.CertDir, sec)
	for _, bundle := range bundles(t, c) {
		assert.Equal(t, sec.Data[CAFile], bundle)
	}
}

func TestSelfManagedStaleReplicaNeverDowngradesBundle(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	c := newFakeClient(t, nil, webhookConfigs()...)
	a, b := newReplica(t, c, clk), newReplica(t, c, clk)
	require.NoError(t, a.Sync(ctx))
	require.NoError(t, b.Sync(ctx))
	stale := getSecret(t, c)
	require.NoError(t, a.Rotate(ctx))
	fresh := getSecret(t, c)

	// B read the Secret just before A rotated, and injects afterwards.
	err := b.injectAll(ctx, stale)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "newer than the secret read")
	for _, bundle := range bundles(t, c) {
		assert.Equal(t, fresh.Data[CAFile], bundle)
	}
	// Its next full pass re-reads and converges.
	require.NoError(t, b.Sync(ctx))
	assertFilesMatchSecret(t, b.opts.CertDir, fresh)
}

func TestSelfManagedReplacesUnusableSecret(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	wrongNames, err := Generate(Options{DNSNames: []string{"other.example"}, Validity: testValidity, Now: clk.Now()})
	require.NoError(t, err)
	for name, data := range map[string]map[string][]byte{
		"empty":          {},
		"garbage":        {corev1.TLSCertKey: []byte("x"), corev1.TLSPrivateKeyKey: []byte("y"), CAFile: []byte("z")},
		"wrong DNS name": {corev1.TLSCertKey: wrongNames.ServerCert, corev1.TLSPrivateKeyKey: wrongNames.ServerKey, CAFile: wrongNames.CACert},
	} {
		t.Run(name, func(t *testing.T) {
			existing := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testSecret}, Type: corev1.SecretTypeTLS, Data: data}
			c := newFakeClient(t, nil, append(webhookConfigs(), existing)...)
			a := newReplica(t, c, clk)
			require.NoError(t, a.Sync(ctx))
			sec := getSecret(t, c)
			assert.Equal(t, "1", sec.Annotations[AnnotationGeneration])
			require.Len(t, certsOf(t, sec.Data[CAFile]), 2, "an unusable secret's CA is not kept: a fresh signer and the staged next CA")
			assert.Equal(t, sec.Data[NextCAFile], certsOfPEM(t, sec.Data[CAFile], 1))
			assert.True(t, verifies(t, sec.Data[corev1.TLSCertKey], sec.Data[CAFile], clk.Now()))
			assertFilesMatchSecret(t, a.opts.CertDir, sec)
		})
	}
}

func TestSelfManagedAdoptsValidForeignSecret(t *testing.T) {
	// A Secret left by cert-manager (mode switch) is used as it is.
	ctx := context.Background()
	clk := newClock()
	a := newReplica(t, nil, clk)
	b, err := Generate(Options{DNSNames: a.DNSNames(), Validity: testValidity, Now: clk.Now()})
	require.NoError(t, err)
	existing := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: testSecret},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: b.ServerCert, corev1.TLSPrivateKeyKey: b.ServerKey, CAFile: b.CACert},
	}
	c := newFakeClient(t, nil, append(webhookConfigs(), existing)...)
	a.c = c
	require.NoError(t, a.Sync(ctx))
	sec := getSecret(t, c)
	assert.Equal(t, b.ServerCert, sec.Data[corev1.TLSCertKey], "the foreign certificate keeps being served")
	assert.Equal(t, "1", sec.Annotations[AnnotationGeneration], "a next CA was staged for the first rotation")
	assertFilesMatchSecret(t, a.opts.CertDir, sec)
	for _, bundle := range bundles(t, c) {
		assert.Equal(t, joinPEM(b.CACert, sec.Data[NextCAFile]), bundle, "the foreign CA stays trusted, the staged one is added")
	}
}

func TestSelfManagedRequiresOptions(t *testing.T) {
	s := NewSelfManaged(nil, SelfManagedOptions{Namespace: testNS})
	err := s.Sync(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SecretName")
	assert.False(t, s.NeedLeaderElection())
}
