package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// AnnotationGeneration counts rotations of the self-managed Secret. It is
// copied onto both webhook configurations with the CA bundle, so a replica
// that read an older Secret can tell it is stale and never overwrites a
// newer bundle with an older one.
const AnnotationGeneration = "trainguard.io/cert-generation"

// Keys of the self-managed Secret besides tls.crt, tls.key and ca.crt: the
// CA staged for the next rotation, already in ca.crt. Its key never leaves
// the Secret (it is not written to the cert dir).
const (
	NextCAFile    = "ca-next.crt"
	NextCAKeyFile = "ca-next.key"
)

// Defaults of SelfManagedOptions.
const (
	DefaultSelfManagedValidity = 365 * 24 * time.Hour
	DefaultRefreshInterval     = 30 * time.Second
	// maxConflicts bounds optimistic-concurrency retries on the Secret: each
	// conflict means another replica made progress, so a few always suffice.
	maxConflicts = 5
)

// SelfManagedOptions configures SelfManaged.
type SelfManagedOptions struct {
	// Namespace holds the Secret and the webhook Service (the release namespace).
	Namespace string
	// SecretName is the kubernetes.io/tls Secret (with ca.crt) shared by all replicas.
	SecretName string
	// ServiceName is the webhook Service; the certificate covers its DNS names.
	ServiceName string
	// ExtraDNSNames and IPAddresses are covered by the serving certificate
	// in addition to the Service's names, for webhook configurations that
	// reach trainguard by URL (e.g. https://127.0.0.1:9443 in a test control
	// plane, or a host name outside the cluster). A Secret whose certificate
	// lacks any of them is rotated.
	ExtraDNSNames []string
	IPAddresses   []net.IP
	// WebhookConfigName names both the Mutating and the Validating configuration.
	WebhookConfigName string
	// CertDir receives tls.crt, tls.key and ca.crt for the webhook server.
	CertDir string
	// Validity of a generated serving certificate (the CA lives twice as
	// long). A certificate is rotated when less than a third of it remains.
	Validity time.Duration
	// RefreshInterval is how often the Secret, the files and the CA bundles
	// are checked again (so a removed caBundle comes back within it).
	RefreshInterval time.Duration
	// Now is injectable so tests can move past the rotation threshold.
	Now func() time.Time
	// Log defaults to the logger in Start's context.
	Log logr.Logger
}

// SelfManaged keeps the webhook's serving certificate without cert-manager:
// it creates a CA and a serving certificate in a Secret, writes them to the
// cert dir (the webhook server's certwatcher reloads them), injects the CA
// bundle into every entry of both webhook configurations and rotates before
// expiry without a window: the CA that will sign the next certificate is
// generated one rotation ahead and kept in the bundle (its key in the
// Secret), so it is trusted long before anything it signs is served, and a
// CA leaves the bundle only once it has expired, so replicas still serving
// an older certificate stay trusted. No sleep stands in for propagation.
//
// Every replica runs it (it needs no leader election): they agree on one
// Secret through the API server's optimistic concurrency, creating it only
// if absent and rotating it only with an Update at the resourceVersion they
// read. The client must not be cache-backed: a cached Get on Secrets would
// start a cluster-wide informer, which the chart's namespaced, name-restricted
// RBAC deliberately does not allow.
type SelfManaged struct {
	c    client.Client
	opts SelfManagedOptions

	// syncMu serialises passes within this process (Prepare, Start, Rotate).
	syncMu sync.Mutex

	mu       sync.Mutex
	ready    bool
	notAfter time.Time
	lastErr  error
}

// NewSelfManaged returns a SelfManaged for c (an uncached client) and opts.
func NewSelfManaged(c client.Client, opts SelfManagedOptions) *SelfManaged {
	if opts.Validity <= 0 {
		opts.Validity = DefaultSelfManagedValidity
	}
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &SelfManaged{c: c, opts: opts}
}

// NeedLeaderElection is false: every replica serves, so every replica needs
// the certificate on disk.
func (s *SelfManaged) NeedLeaderElection() bool { return false }

// DNSNames are the names the serving certificate covers: the Service's,
// then ExtraDNSNames.
func (s *SelfManaged) DNSNames() []string {
	svc, ns := s.opts.ServiceName, s.opts.Namespace
	names := []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"}
	return append(names, s.opts.ExtraDNSNames...)
}

// Start keeps certificates, files and CA bundles in place until ctx ends.
// Errors are retried with backoff rather than returned: stopping the manager
// would take admission down with it, while a retry usually succeeds once the
// API server or the webhook configurations are back.
func (s *SelfManaged) Start(ctx context.Context) error {
	if err := s.opts.validate(); err != nil {
		return err
	}
	logger := s.logger(ctx)
	backoff := time.Second
	for {
		wait := s.opts.RefreshInterval
		if err := s.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			logger.Error(err, "self-managed certificates not in place; retrying", "after", backoff)
			wait = min(backoff, s.opts.RefreshInterval)
			backoff = min(2*backoff, s.opts.RefreshInterval)
		} else {
			backoff = time.Second
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}

// Prepare makes sure the Secret exists and the files are in the cert dir,
// retrying until ctx ends. Call it before the webhook server starts: its
// certwatcher refuses to start without the files. It does not wait for the
// webhook configurations, which Helm may create after the Deployment.
func (s *SelfManaged) Prepare(ctx context.Context) error {
	if err := s.opts.validate(); err != nil {
		return err
	}
	backoff := 500 * time.Millisecond
	for {
		err := s.prepareOnce(ctx)
		if err == nil {
			return nil
		}
		s.setErr(err)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("preparing self-managed certificates: %w", err)
		case <-timer.C:
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (s *SelfManaged) prepareOnce(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	sec, err := s.ensureSecret(ctx, false)
	if err != nil {
		return err
	}
	return s.writeFiles(sec)
}

// Sync makes one full pass: Secret (created or rotated if needed), CA bundle
// in both webhook configurations, files in the cert dir. The bundle goes in
// before the files: a replica only serves a new certificate once the API
// server already trusts its CA.
func (s *SelfManaged) Sync(ctx context.Context) error {
	return s.pass(ctx, false)
}

// Rotate replaces the certificate now, whatever its remaining validity
// (keeping the previous CA in the bundle), then syncs.
func (s *SelfManaged) Rotate(ctx context.Context) error {
	return s.pass(ctx, true)
}

func (s *SelfManaged) pass(ctx context.Context, force bool) error {
	if err := s.opts.validate(); err != nil {
		return err
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	err := s.passLocked(ctx, force)
	s.setErr(err)
	return err
}

func (s *SelfManaged) passLocked(ctx context.Context, force bool) error {
	sec, err := s.ensureSecret(ctx, force)
	if err != nil {
		return err
	}
	// No wait between injecting and serving: the CA that signed sec's
	// certificate has been in the bundle since the previous rotation (see
	// rotateInto), so every API server already trusts it.
	if err := s.injectAll(ctx, sec); err != nil {
		return err
	}
	if err := s.writeFiles(sec); err != nil {
		return err
	}
	leaf, err := parseLeaf(sec.Data[corev1.TLSCertKey])
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ready, s.notAfter = true, leaf.NotAfter
	s.mu.Unlock()
	return nil
}

// ReadyCheck is a healthz.Checker: not ready until the first full pass has
// put the certificate on disk and its CA in the webhook configurations.
// Later failures (say, a caBundle removed by hand) keep it ready: the pod
// still serves correctly and Start repairs the bundle, whereas dropping out
// of the Service would turn a cosmetic problem into an admission outage.
func (s *SelfManaged) ReadyCheck(_ *http.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready {
		if s.lastErr != nil {
			return fmt.Errorf("self-managed certificates not in place yet: %w", s.lastErr)
		}
		return errors.New("self-managed certificates not in place yet")
	}
	if now := s.opts.Now(); !now.Before(s.notAfter) {
		return fmt.Errorf("serving certificate expired at %s", s.notAfter.Format(time.RFC3339))
	}
	return nil
}

func (s *SelfManaged) setErr(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

func (s *SelfManaged) logger(ctx context.Context) logr.Logger {
	if s.opts.Log.GetSink() != nil {
		return s.opts.Log
	}
	return log.FromContext(ctx).WithName("self-managed-certs")
}

func (o SelfManagedOptions) validate() error {
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"Namespace", o.Namespace}, {"SecretName", o.SecretName}, {"ServiceName", o.ServiceName},
		{"WebhookConfigName", o.WebhookConfigName}, {"CertDir", o.CertDir},
	} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("self-managed certificates: options %v are required", missing)
	}
	return nil
}

// ensureSecret returns the shared Secret, creating it if absent and
// replacing its content if it is unusable, due for rotation or force is set.
func (s *SelfManaged) ensureSecret(ctx context.Context, force bool) (*corev1.Secret, error) {
	key := types.NamespacedName{Namespace: s.opts.Namespace, Name: s.opts.SecretName}
	logger := s.logger(ctx)
	for range maxConflicts {
		sec := &corev1.Secret{}
		err := s.c.Get(ctx, key, sec)
		if apierrors.IsNotFound(err) {
			created, err := s.newSecret()
			if err != nil {
				return nil, err
			}
			err = s.c.Create(ctx, created)
			if apierrors.IsAlreadyExists(err) {
				// Another replica won the race: use its Secret.
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("creating secret %s: %w", key, err)
			}
			logger.Info("created self-managed certificate", "secret", key.String())
			return created, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading secret %s: %w", key, err)
		}
		reason, err := s.update(sec, force)
		if err != nil {
			return nil, err
		}
		if reason == "" {
			return sec, nil
		}
		// Update carries the resourceVersion we read: if another replica
		// rotated meanwhile, we get a conflict and adopt its result.
		err = s.c.Update(ctx, sec)
		if apierrors.IsConflict(err) {
			force = false
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rotating secret %s: %w", key, err)
		}
		logger.Info("rotated self-managed certificate", "secret", key.String(), "reason", reason, "generation", generation(sec))
		return sec, nil
	}
	return nil, fmt.Errorf("secret %s: still conflicting after %d attempts", key, maxConflicts)
}

func (s *SelfManaged) generate() (*Bundle, error) {
	b, err := Generate(Options{DNSNames: s.DNSNames(), IPs: s.opts.IPAddresses, Validity: s.opts.Validity, Now: s.opts.Now()})
	if err != nil {
		return nil, fmt.Errorf("generating self-managed certificate: %w", err)
	}
	return b, nil
}

func (s *SelfManaged) newSecret() (*corev1.Secret, error) {
	b, err := s.generate()
	if err != nil {
		return nil, err
	}
	next, err := s.newCA()
	if err != nil {
		return nil, err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   s.opts.Namespace,
			Name:        s.opts.SecretName,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "trainguard"},
			Annotations: map[string]string{AnnotationGeneration: "1"},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       b.ServerCert,
			corev1.TLSPrivateKeyKey: b.ServerKey,
			CAFile:                  joinPEM(b.CACert, next.CertPEM),
			NextCAFile:              next.CertPEM,
			NextCAKeyFile:           next.KeyPEM,
		},
	}
	return sec, nil
}

// update changes sec as needed and says why, or returns "" when it is fine:
//   - unusable (no pair, wrong names, untrusted): regenerated whole, CA
//     included, as nothing valid can be served from it anyway;
//   - no usable staged next CA (a Secret from an older trainguard or from
//     cert-manager): one is staged in the bundle, and the certificate is
//     left alone until a later pass, once the bundle carrying it is injected;
//   - due (a third of the validity left) or forced: rotateInto.
func (s *SelfManaged) update(sec *corev1.Secret, force bool) (string, error) {
	if reason := s.unusable(sec); reason != "" {
		fresh, err := s.newSecret()
		if err != nil {
			return "", err
		}
		sec.Data = fresh.Data
		bumpGeneration(sec)
		return reason, nil
	}
	next := s.stagedCA(sec)
	if next == nil {
		if err := s.stageNextCA(sec); err != nil {
			return "", err
		}
		return "staging the next CA in the bundle ahead of the rotation that uses it", nil
	}
	reason := s.due(sec)
	if reason == "" && !force {
		return "", nil
	}
	if reason == "" {
		reason = "rotation requested"
	}
	return reason, s.rotateInto(sec, next)
}

// rotateInto issues the new serving certificate from the staged CA, which
// the bundle has carried since the previous rotation, and stages a fresh
// CA for the next one. The bundle keeps every CA that has not expired
// (replicas may still serve a certificate from any of them) and drops the
// expired ones.
func (s *SelfManaged) rotateInto(sec *corev1.Secret, signer *CA) error {
	b, err := signer.Issue(s.issueOptions())
	if err != nil {
		return fmt.Errorf("issuing self-managed certificate: %w", err)
	}
	next, err := s.newCA()
	if err != nil {
		return err
	}
	sec.Data[corev1.TLSCertKey] = b.ServerCert
	sec.Data[corev1.TLSPrivateKeyKey] = b.ServerKey
	sec.Data[CAFile] = joinPEM(s.unexpired(sec.Data[CAFile]), next.CertPEM)
	sec.Data[NextCAFile], sec.Data[NextCAKeyFile] = next.CertPEM, next.KeyPEM
	bumpGeneration(sec)
	return nil
}

// stageNextCA adds a fresh CA to the bundle and the Secret without touching
// the certificate being served.
func (s *SelfManaged) stageNextCA(sec *corev1.Secret) error {
	next, err := s.newCA()
	if err != nil {
		return err
	}
	sec.Data[CAFile] = joinPEM(s.unexpired(sec.Data[CAFile]), next.CertPEM)
	sec.Data[NextCAFile], sec.Data[NextCAKeyFile] = next.CertPEM, next.KeyPEM
	bumpGeneration(sec)
	return nil
}

// stagedCA is the staged next CA, or nil unless it parses, matches its key,
// is already in the bundle and outlives a serving certificate issued now.
func (s *SelfManaged) stagedCA(sec *corev1.Secret) *CA {
	ca, err := ParseCA(sec.Data[NextCAFile], sec.Data[NextCAKeyFile])
	if err != nil {
		return nil
	}
	if !ca.Cert.NotAfter.After(s.opts.Now().Add(s.opts.Validity)) {
		return nil
	}
	bundle, err := ParseCertificates(sec.Data[CAFile])
	if err != nil {
		return nil
	}
	for _, c := range bundle {
		if c.Equal(ca.Cert) {
			return ca
		}
	}
	return nil
}

// unexpired returns the CAs of bundle that have not expired, PEM encoded.
func (s *SelfManaged) unexpired(bundle []byte) []byte {
	cas, err := ParseCertificates(bundle)
	if err != nil {
		return nil
	}
	var out []byte
	now := s.opts.Now()
	for _, c := range cas {
		if now.Before(c.NotAfter) {
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
		}
	}
	return out
}

func (s *SelfManaged) newCA() (*CA, error) {
	// Twice the serving validity: a CA staged now still outlives the
	// certificate it will sign at the next rotation.
	ca, err := NewCA(2*s.opts.Validity, s.opts.Now())
	if err != nil {
		return nil, fmt.Errorf("generating self-managed CA: %w", err)
	}
	return ca, nil
}

func (s *SelfManaged) issueOptions() Options {
	return Options{DNSNames: s.DNSNames(), IPs: s.opts.IPAddresses, Validity: s.opts.Validity, Now: s.opts.Now()}
}

func joinPEM(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func bumpGeneration(sec *corev1.Secret) {
	if sec.Annotations == nil {
		sec.Annotations = map[string]string{}
	}
	sec.Annotations[AnnotationGeneration] = strconv.FormatInt(generation(sec)+1, 10)
}

// unusable says why sec cannot be served as it is, or "" if it can. A
// Secret written by someone else (e.g. cert-manager, before a switch to
// self-managed mode) is adopted as long as it is valid for the Service.
func (s *SelfManaged) unusable(sec *corev1.Secret) string {
	certPEM, keyPEM, caPEM := sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey], sec.Data[CAFile]
	if len(certPEM) == 0 || len(keyPEM) == 0 || len(caPEM) == 0 {
		return "secret lacks tls.crt, tls.key or ca.crt"
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return "tls.crt and tls.key do not form a pair: " + err.Error()
	}
	leaf, err := parseLeaf(certPEM)
	if err != nil {
		return err.Error()
	}
	if _, err := s.verify(leaf, caPEM); err != nil {
		return "tls.crt is not valid for the webhook service: " + err.Error()
	}
	for _, name := range s.DNSNames() {
		if err := leaf.VerifyHostname(name); err != nil {
			return "tls.crt does not cover " + name
		}
	}
	for _, ip := range s.opts.IPAddresses {
		if err := leaf.VerifyHostname(ip.String()); err != nil {
			return "tls.crt does not cover " + ip.String()
		}
	}
	return ""
}

// due says why a usable certificate should be rotated now, or "".
func (s *SelfManaged) due(sec *corev1.Secret) string {
	leaf, err := parseLeaf(sec.Data[corev1.TLSCertKey])
	if err != nil {
		return err.Error()
	}
	if total, left := leaf.NotAfter.Sub(leaf.NotBefore), leaf.NotAfter.Sub(s.opts.Now()); left < total/3 {
		return fmt.Sprintf("less than a third of its validity left (expires %s)", leaf.NotAfter.Format(time.RFC3339))
	}
	return ""
}

func (s *SelfManaged) verify(leaf *x509.Certificate, caPEM []byte) ([][]*x509.Certificate, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("ca.crt holds no certificate")
	}
	return leaf.Verify(x509.VerifyOptions{
		Roots:       roots,
		DNSName:     s.opts.ServiceName + "." + s.opts.Namespace + ".svc",
		CurrentTime: s.opts.Now(),
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// injectAll puts sec's CA bundle into every entry of both configurations.
func (s *SelfManaged) injectAll(ctx context.Context, sec *corev1.Secret) error {
	bundle, gen := sec.Data[CAFile], generation(sec)
	if err := s.inject(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{}, bundle, gen); err != nil {
		return err
	}
	return s.inject(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{}, bundle, gen)
}

// inject updates one configuration (kind given by an empty obj), retrying
// on conflicts with fresh reads.
func (s *SelfManaged) inject(ctx context.Context, empty client.Object, bundle []byte, gen int64) error {
	key := types.NamespacedName{Name: s.opts.WebhookConfigName}
	kind := fmt.Sprintf("%T", empty)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, ok := empty.DeepCopyObject().(client.Object)
		if !ok {
			return fmt.Errorf("%s is not a client.Object", kind)
		}
		if err := s.c.Get(ctx, key, obj); err != nil {
			return err
		}
		if injected := parseGeneration(obj.GetAnnotations()[AnnotationGeneration]); injected > gen {
			return fmt.Errorf("configuration carries CA generation %d, newer than the secret read (%d); re-reading", injected, gen)
		}
		changed := false
		for _, cc := range clientConfigs(obj) {
			if !bytes.Equal(cc.CABundle, bundle) {
				cc.CABundle = append([]byte(nil), bundle...)
				changed = true
			}
		}
		annotations := obj.GetAnnotations()
		if want := strconv.FormatInt(gen, 10); annotations[AnnotationGeneration] != want {
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[AnnotationGeneration] = want
			obj.SetAnnotations(annotations)
			changed = true
		}
		if !changed {
			return nil
		}
		return s.c.Update(ctx, obj)
	})
	if err != nil {
		return fmt.Errorf("injecting CA bundle into %s %s: %w", kind, key.Name, err)
	}
	return nil
}

func clientConfigs(obj client.Object) []*admissionregistrationv1.WebhookClientConfig {
	var out []*admissionregistrationv1.WebhookClientConfig
	switch o := obj.(type) {
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		for i := range o.Webhooks {
			out = append(out, &o.Webhooks[i].ClientConfig)
		}
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		for i := range o.Webhooks {
			out = append(out, &o.Webhooks[i].ClientConfig)
		}
	}
	return out
}

// writeFiles puts sec's content into the cert dir, unless it is already there
// (rewriting would make the certwatcher reload for nothing).
func (s *SelfManaged) writeFiles(sec *corev1.Secret) error {
	b := &Bundle{CACert: sec.Data[CAFile], ServerCert: sec.Data[corev1.TLSCertKey], ServerKey: sec.Data[corev1.TLSPrivateKeyKey]}
	same := true
	for name, want := range map[string][]byte{CAFile: b.CACert, CertFile: b.ServerCert, KeyFile: b.ServerKey} {
		got, err := os.ReadFile(filepath.Join(s.opts.CertDir, name))
		if err != nil || !bytes.Equal(got, want) {
			same = false
			break
		}
	}
	if same {
		return nil
	}
	if err := b.WriteDir(s.opts.CertDir); err != nil {
		return fmt.Errorf("writing self-managed certificate files: %w", err)
	}
	return nil
}

// parseLeaf returns the first certificate of tls.crt: the serving one.
func parseLeaf(certPEM []byte) (*x509.Certificate, error) {
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.crt: %w", err)
	}
	return certs[0], nil
}

func generation(sec *corev1.Secret) int64 {
	return parseGeneration(sec.Annotations[AnnotationGeneration])
}

// parseGeneration reads a generation annotation; absent or garbled counts as
// 0, the generation of a Secret trainguard did not create.
func parseGeneration(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
