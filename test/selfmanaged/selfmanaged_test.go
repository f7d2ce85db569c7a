package selfmanaged

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trainguard/trainguard/certs"
	"github.com/trainguard/trainguard/internal/foundations/contract"
	"github.com/trainguard/trainguard/test/controlplane"
)

var nsCounter atomic.Int64 // unique namespace names across tests.

func getSecret(t *testing.T) *corev1.Secret {
	t.Helper()
	sec := &corev1.Secret{}
	require.NoError(t, env.c.Get(context.Background(), types.NamespacedName{Namespace: controlplane.Namespace, Name: secretName}, sec))
	return sec
}

// injected is what one webhook configuration carries.
type injected struct {
	kind, generation string
	// bundles by webhook entry name.
	bundles map[string][]byte
}

func configurations(t *testing.T) []injected {
	t.Helper()
	ctx := context.Background()
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, env.c.Get(ctx, types.NamespacedName{Name: configName}, m))
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(t, env.c.Get(ctx, types.NamespacedName{Name: configName}, v))
	mi := injected{kind: "mutating", generation: m.Annotations[certs.AnnotationGeneration], bundles: map[string][]byte{}}
	for _, w := range m.Webhooks {
		mi.bundles[w.Name] = w.ClientConfig.CABundle
	}
	vi := injected{kind: "validating", generation: v.Annotations[certs.AnnotationGeneration], bundles: map[string][]byte{}}
	for _, w := range v.Webhooks {
		vi.bundles[w.Name] = w.ClientConfig.CABundle
	}
	return []injected{mi, vi}
}

// bundleInjected reports whether every entry of both configurations carries
// exactly sec's ca.crt, tagged with sec's generation.
func bundleInjected(t *testing.T, sec *corev1.Secret) bool {
	t.Helper()
	for _, cfg := range configurations(t) {
		if cfg.generation != sec.Annotations[certs.AnnotationGeneration] {
			return false
		}
		for _, b := range cfg.bundles {
			if !bytes.Equal(b, sec.Data[certs.CAFile]) {
				return false
			}
		}
	}
	return true
}

func certPool(t *testing.T, pemData []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pemData), "no certificate in PEM data")
	return pool
}

func parseCert(t *testing.T, pemData []byte) *x509.Certificate {
	t.Helper()
	return bundleCerts(t, pemData)[0]
}

// servedLeaf dials trainguard's webhook port the way the API server does
// (host 127.0.0.1, trusting only roots) and returns the certificate served.
func servedLeaf(roots *x509.CertPool) (*x509.Certificate, error) {
	host, _, err := net.SplitHostPort(env.addr)
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(dialer, "tcp", env.addr, &tls.Config{RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// optedInNamespace creates a namespace that opted in by annotation (the
// chart's selectors match the label trainguard mirrors from it).
func optedInNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("sm-%d", nsCounter.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{contract.AnnotationInject: contract.InjectEnabled}}}
	require.NoError(t, env.c.Create(context.Background(), ns))
	return name
}

func trainingPod(ns string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "train-"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "pytorch", Image: "example.com/train:1"}},
		},
	}
}

// admit creates a training pod (dry run unless real) and fails unless
// trainguard's mutating webhook injected it.
func admit(ctx context.Context, ns string, real bool) (*corev1.Pod, error) {
	pod := trainingPod(ns)
	var opts []client.CreateOption
	if !real {
		opts = append(opts, client.DryRunAll)
	}
	if err := env.c.Create(ctx, pod, opts...); err != nil {
		return nil, err
	}
	if _, ok := pod.Annotations[contract.AnnotationInjected]; !ok {
		return pod, fmt.Errorf("pod %s/%s admitted without %s", ns, pod.Name, contract.AnnotationInjected)
	}
	return pod, nil
}

// waitAdmission waits for the namespace's opt-in label to be mirrored, i.e.
// until a training pod is injected.
func waitAdmission(t *testing.T, ns string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := admit(context.Background(), ns, false)
		return err == nil
	}, 15*time.Second, 100*time.Millisecond, "pods in opted-in namespace %s never got injected", ns)
}

func TestSecretIsCreatedAndCABundleInjected(t *testing.T) {
	sec := getSecret(t)
	assert.Equal(t, corev1.SecretTypeTLS, sec.Type)
	assert.Equal(t, "trainguard", sec.Labels["app.kubernetes.io/managed-by"])
	for _, key := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, certs.CAFile} {
		assert.NotEmpty(t, sec.Data[key], "secret key %s", key)
	}
	leaf := parseCert(t, sec.Data[corev1.TLSCertKey])
	for _, host := range []string{serviceName + "." + controlplane.Namespace + ".svc", "127.0.0.1"} {
		assert.NoError(t, leaf.VerifyHostname(host))
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: certPool(t, sec.Data[certs.CAFile])})
	require.NoError(t, err, "tls.crt must chain to ca.crt")

	// trainguard's own SelfManaged (inside server.New) replaces envtest's
	// bundle in every entry of both configurations.
	require.Eventually(t, func() bool { return bundleInjected(t, getSecret(t)) }, 20*time.Second, 100*time.Millisecond,
		"every webhook entry must carry the Secret's CA bundle")
	sec = getSecret(t)
	require.NotEmpty(t, env.envtestCA)
	require.False(t, certs.SameCA(env.envtestCA, sec.Data[certs.CAFile]), "trainguard's CA must not be envtest's")
	entries := 0
	for _, cfg := range configurations(t) {
		// One mutating entry per kind list entry (pods, namespaces, the job
		// kinds incl. batch Jobs); validating: CREATE and UPDATE entries apart.
		want := map[string]int{"mutating": 5, "validating": 9}[cfg.kind]
		require.Len(t, cfg.bundles, want, "%s configuration entries", cfg.kind)
		for name, b := range cfg.bundles {
			assert.Equal(t, sec.Data[certs.CAFile], b, "%s entry %s", cfg.kind, name)
			assert.NotEqual(t, env.envtestCA, b, "%s entry %s still trusts envtest's CA", cfg.kind, name)
			entries++
		}
	}
	assert.Equal(t, 5+9, entries)

	// What is served is the Secret's certificate, trusted by the injected
	// bundle and not by envtest's CA.
	served, err := servedLeaf(certPool(t, sec.Data[certs.CAFile]))
	require.NoError(t, err, "the served certificate must verify against the injected CA bundle")
	assert.Equal(t, leaf.Raw, served.Raw)
	_, err = servedLeaf(certPool(t, env.envtestCA))
	assert.Error(t, err, "the served certificate must not be envtest's")
}

// TestChartRBACIsWhatTheSecondReplicaRunsWith makes sure the impersonation
// is in force, so the rotations below prove the chart's Role and
// ClusterRole suffice: the ServiceAccount reaches its own Secret and
// configurations, and nothing next to them.
func TestChartRBACIsWhatTheSecondReplicaRunsWith(t *testing.T) {
	ctx := context.Background()
	require.NoError(t, env.asSA.Get(ctx, types.NamespacedName{Namespace: controlplane.Namespace, Name: secretName}, &corev1.Secret{}))
	require.NoError(t, env.asSA.Get(ctx, types.NamespacedName{Name: configName}, &admissionregistrationv1.MutatingWebhookConfiguration{}))
	require.NoError(t, env.asSA.Get(ctx, types.NamespacedName{Name: configName}, &admissionregistrationv1.ValidatingWebhookConfiguration{}))

	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: controlplane.Namespace, Name: "not-trainguards"}, StringData: map[string]string{"k": "v"}}
	require.NoError(t, env.c.Create(ctx, other))
	err := env.asSA.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{})
	assert.True(t, apierrors.IsForbidden(err), "the ServiceAccount must not read other Secrets, got %v", err)
	err = env.asSA.List(ctx, &corev1.SecretList{}, client.InNamespace(controlplane.Namespace))
	assert.True(t, apierrors.IsForbidden(err), "the ServiceAccount must not list Secrets, got %v", err)
	err = env.asSA.Get(ctx, types.NamespacedName{Name: "someone-elses"}, &admissionregistrationv1.MutatingWebhookConfiguration{})
	assert.True(t, apierrors.IsForbidden(err), "the ServiceAccount must not get other webhook configurations, got %v", err)

	// The second fence is in force too: the account that rotates the CA
	// bundle below cannot change anything else of the configurations.
	err = fenceProbe(ctx, env.asSA)
	require.Error(t, err, "changing a webhook's failurePolicy must be refused")
	assert.Contains(t, err.Error(), fencePolicy)
}

func TestAdmissionWorksThroughSelfManagedCertificate(t *testing.T) {
	ctx := context.Background()
	require.Eventually(t, func() bool { return bundleInjected(t, getSecret(t)) }, 20*time.Second, 100*time.Millisecond)
	ns := optedInNamespace(t)
	waitAdmission(t, ns)

	pod, err := admit(ctx, ns, true)
	require.NoError(t, err)
	assert.NotEmpty(t, pod.Annotations[contract.AnnotationInjected])
	stored := &corev1.Pod{}
	require.NoError(t, env.c.Get(ctx, client.ObjectKeyFromObject(pod), stored))
	assert.Equal(t, pod.Annotations[contract.AnnotationInjected], stored.Annotations[contract.AnnotationInjected])
}

// failures counts failures from several goroutines, keeping the first few
// for the report.
type failures struct {
	mu    sync.Mutex
	count int
	first []string
}

// maxKept bounds the failures kept for the report; the rest are counted.
const maxKept = 5

func (f *failures) add(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count++
	if len(f.first) < maxKept {
		f.first = append(f.first, msg)
	}
}

func (f *failures) get() (int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count, f.first
}

// load creates training pods (dry run) from several goroutines until
// stopped, counting successes and failures.
type load struct {
	ok     atomic.Int64
	failed failures
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startLoad(ns string, workers int) *load { return startPacedLoad(ns, workers, 0) }

// startPacedLoad is startLoad at a steady rps requests per second (0: as
// fast as the workers go); workers must be enough to keep that pace.
func startPacedLoad(ns string, workers, rps int) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	var ticks <-chan time.Time
	if rps > 0 {
		ticker := time.NewTicker(time.Second / time.Duration(rps))
		l.wg.Go(func() { <-ctx.Done(); ticker.Stop() })
		ticks = ticker.C
	}
	for range workers {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				if ticks != nil {
					select {
					case <-ctx.Done():
						return
					case <-ticks:
					}
				}
				reqCtx, done := context.WithTimeout(ctx, 15*time.Second)
				_, err := admit(reqCtx, ns, false)
				done()
				switch {
				case err == nil:
					l.ok.Add(1)
				case ctx.Err() != nil && errors.Is(err, context.Canceled):
					// Stopped mid-request: not a failure of trainguard.
				default:
					l.failed.add(err.Error())
				}
			}
		})
	}
	return l
}

// stop returns how many requests failed, and the first few errors.
func (l *load) stop() (int, []string) {
	l.cancel()
	l.wg.Wait()
	return l.failed.get()
}

// waitFor waits until the load has made n more successful requests.
func (l *load) waitFor(t *testing.T, n int64, msg string) {
	t.Helper()
	target := l.ok.Load() + n
	require.Eventually(t, func() bool { return l.ok.Load() >= target }, 20*time.Second, 20*time.Millisecond, msg)
}

// observer makes a fresh TLS handshake with trainguard over and over, as
// the API server does whenever it opens a connection, and checks that the
// certificate served verifies against the bundle of every webhook entry
// read right after the handshake. The API server's own webhook connections
// are kept alive across a rotation, so without this a replica serving a
// certificate before its CA is injected would go unnoticed.
type observer struct {
	handshakes atomic.Int64
	untrusted  failures
	cancel     context.CancelFunc
	done       chan struct{}
}

func startObserver(t *testing.T) *observer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o := &observer{cancel: cancel, done: make(chan struct{})}
	host, _, err := net.SplitHostPort(env.addr)
	require.NoError(t, err)
	go func() {
		defer close(o.done)
		for ctx.Err() == nil {
			// Trust is checked by hand below, against the bundle the API
			// server holds after the handshake.
			conn, err := tls.Dial("tcp", env.addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) // verified below
			if err != nil {
				o.untrusted.add(fmt.Sprintf("dial: %v", err))
				continue
			}
			leaf := conn.ConnectionState().PeerCertificates[0]
			_ = conn.Close()
			o.handshakes.Add(1)
			if msg := untrustedBy(ctx, leaf, host); msg != "" {
				o.untrusted.add(msg)
			}
		}
	}()
	return o
}

// untrustedBy names the first webhook entry whose bundle does not trust
// leaf for host, or returns "".
func untrustedBy(ctx context.Context, leaf *x509.Certificate, host string) string {
	for _, cfg := range configurationsNoT(ctx) {
		for name, b := range cfg.bundles {
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(b) {
				return fmt.Sprintf("%s entry %s has no CA bundle", cfg.kind, name)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
				return fmt.Sprintf("served certificate %x not trusted by %s entry %s: %v", leaf.SerialNumber, cfg.kind, name, err)
			}
		}
	}
	return ""
}

// stop returns how many handshakes served an untrusted certificate, and the first few.
func (o *observer) stop() (int, []string) {
	o.cancel()
	<-o.done
	return o.untrusted.get()
}

// configurationsNoT reads both configurations outside the test goroutine;
// a read error (only at shutdown) yields nothing to check.
func configurationsNoT(ctx context.Context) []injected {
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if env.c.Get(ctx, types.NamespacedName{Name: configName}, m) != nil || env.c.Get(ctx, types.NamespacedName{Name: configName}, v) != nil {
		return nil
	}
	mi := injected{kind: "mutating", bundles: map[string][]byte{}}
	for _, w := range m.Webhooks {
		mi.bundles[w.Name] = w.ClientConfig.CABundle
	}
	vi := injected{kind: "validating", bundles: map[string][]byte{}}
	for _, w := range v.Webhooks {
		vi.bundles[w.Name] = w.ClientConfig.CABundle
	}
	return []injected{mi, vi}
}

// rotationRPS is the admission load kept up during the forced rotations.
const rotationRPS = 200

func TestForcedRotationIsPickedUpWithoutRestartOrFailedRequest(t *testing.T) {
	ctx := context.Background()
	require.Eventually(t, func() bool { return bundleInjected(t, getSecret(t)) }, 20*time.Second, 100*time.Millisecond)
	ns := optedInNamespace(t)
	waitAdmission(t, ns)

	original := getSecret(t)
	originalCA := parseCert(t, original.Data[certs.CAFile])
	before, err := servedLeaf(certPool(t, original.Data[certs.CAFile]))
	require.NoError(t, err)

	closedBefore := closedEarly(t)
	obs := startObserver(t)
	defer obs.stop() //nolint:errcheck // stopped and checked below; this is for early returns.
	l := startPacedLoad(ns, 64, rotationRPS)
	defer l.stop() //nolint:errcheck // stopped and checked below; this is for early returns.
	start := time.Now()
	l.waitFor(t, 50, "admission must work before the rotation")

	// Three rotations back to back under load. Each certificate is signed by
	// the CA staged one rotation earlier, so the bundle the API server
	// holds already trusts it when it is first served: no wait, no window.
	served := before
	for round := 1; round <= 3; round++ {
		previous := getSecret(t)
		require.NoError(t, env.sm.Rotate(ctx), "rotation %d", round)
		sec := getSecret(t)
		require.NotEqual(t, previous.Data[corev1.TLSCertKey], sec.Data[corev1.TLSCertKey], "rotation %d must replace the certificate", round)
		assert.Equal(t, fmt.Sprint(parseGen(t, previous)+1), sec.Annotations[certs.AnnotationGeneration])
		require.True(t, bundleInjected(t, sec), "rotation %d: bundle must be in every entry once Rotate returns", round)
		assert.NoError(t, verifyAgainst(sec.Data[corev1.TLSCertKey], previous.Data[certs.CAFile]),
			"rotation %d: the new certificate's CA was already in the previous bundle", round)

		want := parseCert(t, sec.Data[corev1.TLSCertKey])
		// Picked up by the running webhook server (its certwatcher), no restart.
		require.Eventually(t, func() bool {
			leaf, err := servedLeaf(certPool(t, sec.Data[certs.CAFile]))
			if err != nil {
				return false
			}
			served = leaf
			return leaf.SerialNumber.Cmp(want.SerialNumber) == 0
		}, 20*time.Second, 50*time.Millisecond, "rotation %d: the new certificate is never served", round)
		assert.NotEqual(t, 0, served.SerialNumber.Cmp(before.SerialNumber), "rotation %d: served serial must change", round)
		l.waitFor(t, rotationRPS, fmt.Sprintf("admission must keep working for a second after rotation %d", round))
	}

	failed, firstFailures := l.stop()
	elapsed := time.Since(start)
	untrusted, first := obs.stop()
	closed := closedEarly(t)
	for reason, n := range closedBefore {
		closed[reason] -= n
	}
	// Each rotation changes the CA bundle, and the API server then dials a
	// new pool of connections while the old pool's stay open, idle: the
	// closed connections say whether trainguard's per-source share made
	// room for the new pool (idle-per-source) or refused it (per-source).
	assert.Zero(t, failed, "admission requests failed during rotation (connections trainguard closed early, by reason: %v), first ones: %v",
		closed, firstFailures)
	assert.Zero(t, untrusted, "handshakes served a certificate the injected bundles did not trust, first ones: %v", first)
	assert.Positive(t, obs.handshakes.Load())
	t.Logf("%d admission requests in %s (%.0f/s, paced at %d/s) during three rotations, %d failed; %d fresh handshakes, %d untrusted; "+
		"connections trainguard closed early, by reason: %v",
		l.ok.Load(), elapsed.Round(time.Millisecond), float64(l.ok.Load())/elapsed.Seconds(), rotationRPS, failed, obs.handshakes.Load(), untrusted, closed)

	// The original CA has not expired, so it is still trusted (a replica
	// that missed the rotations stays reachable); the served certificate
	// no longer comes from it; readiness is intact.
	sec := getSecret(t)
	kept := false
	for _, c := range bundleCerts(t, sec.Data[certs.CAFile]) {
		kept = kept || c.Equal(originalCA)
	}
	assert.True(t, kept, "a CA leaves the bundle only once it has expired")
	leaf, err := servedLeaf(certPool(t, sec.Data[certs.CAFile]))
	require.NoError(t, err)
	assert.NotEqual(t, 0, leaf.SerialNumber.Cmp(before.SerialNumber))
	assert.NoError(t, env.sm.ReadyCheck(nil))

	// And the API server itself trusts it: a fresh request is admitted.
	_, err = admit(ctx, ns, true)
	assert.NoError(t, err)
}

// closedEarly reads trainguard_webhook_connections_closed_early_total by
// reason from the registry of trainguard's in-process manager.
func closedEarly(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "trainguard_webhook_connections_closed_early_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" {
					out[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// verifyAgainst checks that certPEM chains to one of bundle's CAs.
func verifyAgainst(certPEM, bundle []byte) error {
	cs, err := certs.ParseCertificates(certPEM)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(bundle)
	_, err = cs[0].Verify(x509.VerifyOptions{Roots: roots})
	return err
}

func parseGen(t *testing.T, sec *corev1.Secret) int64 {
	t.Helper()
	var n int64
	_, err := fmt.Sscan(sec.Annotations[certs.AnnotationGeneration], &n)
	require.NoError(t, err)
	return n
}

func bundleCerts(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	out, err := certs.ParseCertificates(bundle)
	require.NoError(t, err)
	return out
}
