package trainer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/trainguard/trainguard/test/chart"
	"github.com/trainguard/trainguard/test/controlplane"
)

type bins struct{ trainer, jobset string }

// binaries returns the built controllers of rel, checking their version stamps.
func binaries(rel release) (bins, error) {
	root, err := chart.RepoRoot()
	if err != nil {
		return bins{}, err
	}
	dir := filepath.Join(root, "bin", "trainer")
	b := bins{trainer: filepath.Join(dir, rel.trainerBinary()), jobset: filepath.Join(dir, rel.jobsetBinary())}
	for bin, want := range map[string]string{b.trainer: rel.trainer, b.jobset: rel.jobset} {
		got, err := os.ReadFile(filepath.Join(dir, "."+filepath.Base(bin)+".version"))
		if err != nil || strings.TrimSpace(string(got)) != want {
			return bins{}, fmt.Errorf("%s %s not built: run `make trainer-bins` (hack/build-trainer.sh)", bin, want)
		}
	}
	return b, nil
}

// installThirdParty installs JobSet's and Trainer's CRDs (and for
// v2.0.0 the PodGroup CRD) from the module cache, the namespaces the
// controllers run in, and the configurations Trainer's certificate rotator
// fills (see trainerWebhooks).
func installThirdParty(cp *controlplane.ControlPlane, rel release) error {
	paths, err := crdPaths(rel)
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{ErrorIfPathMissing: true, Paths: paths}); err != nil {
		return fmt.Errorf("installing Trainer and JobSet CRDs: %w", err)
	}
	ctx := context.Background()
	for _, ns := range []string{"kubeflow-system", "jobset-system"} {
		if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
	}
	// Trainer's manifests ship this Secret empty; its rotator fills it.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kubeflow-system", Name: "kubeflow-trainer-webhook-cert"}}
	if err := cp.Client.Create(ctx, secret); err != nil {
		return err
	}
	for _, obj := range trainerWebhooks(rel) {
		if err := cp.Client.Create(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

// crdPaths are the CRD files of rel in the module cache: JobSet's,
// Trainer's (manifests/base/crds in every release) and PodGroup's if rel
// installs it.
func crdPaths(rel release) ([]string, error) {
	tdir, err := chart.ModuleDir(rel.trainerModule())
	if err != nil {
		return nil, err
	}
	jdir, err := chart.ModuleDir(rel.jobsetModule())
	if err != nil {
		return nil, err
	}
	paths := []string{filepath.Join(jdir, "config", "components", "crd", "bases"), filepath.Join(tdir, "manifests", "base", "crds")}
	if rel.podGroupModule == "" {
		return paths, nil
	}
	sdir, err := chart.ModuleDir(rel.podGroupModule)
	if err != nil {
		return nil, err
	}
	return append(paths, filepath.Join(sdir, "config", "crd", "bases", "scheduling.x-k8s.io_podgroups.yaml")), nil
}

// trainerWebhooks are the webhook configurations Trainer's certificate
// rotator must find (by name) before Trainer starts its controllers: the
// ValidatingWebhookConfiguration validator.trainer.kubeflow.org, and from
// v2.2 also the MutatingWebhookConfiguration defaulter.trainer.kubeflow.org
// (pkg/util/cert). Trainer serves its webhooks for the Service name
// kubeflow-trainer-controller-manager.kubeflow-system.svc, which envtest's
// API server cannot reach; the entries match no object, so Trainer's own
// admission checks are not exercised here (validators/testdata/trainer
// holds them), while its controllers run for real.
func trainerWebhooks(rel release) []client.Object {
	ignore, sideEffects := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	neverMatches := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "trainguard.io/never-matches", Operator: metav1.LabelSelectorOpExists}}}
	rules := []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"trainer.kubeflow.org"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"trainjobs"}}}}
	service := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "kubeflow-system", Name: "kubeflow-trainer-controller-manager", Path: &path}}
	}
	objs := []client.Object{&admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "validator.trainer.kubeflow.org"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "validator.trainjob.trainer.kubeflow.org", ClientConfig: service("/validate-trainer-kubeflow-org-v1alpha1-trainjob"),
			Rules: rules, ObjectSelector: neverMatches, FailurePolicy: &ignore, SideEffects: &sideEffects, AdmissionReviewVersions: []string{"v1"}}},
	}}
	if !rel.configFile {
		return objs
	}
	return append(objs, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "defaulter.trainer.kubeflow.org"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "defaulter.trainjob.trainer.kubeflow.org", ClientConfig: service("/mutate-trainer-kubeflow-org-v1alpha1-trainjob"),
			Rules: rules, ObjectSelector: neverMatches, FailurePolicy: &ignore, SideEffects: &sideEffects, AdmissionReviewVersions: []string{"v1"}}},
	})
}

// startControllers starts JobSet's and Trainer's controller managers as
// processes and waits until both report ready.
func startControllers(ctx context.Context, cp *controlplane.ControlPlane, rel release, b bins) (func(), error) {
	dir, err := os.MkdirTemp("", "trainguard-trainer-")
	if err != nil {
		return func() {}, err
	}
	var procs []*exec.Cmd
	stop := func() {
		for _, p := range procs {
			stopProcess(p)
		}
		_ = os.RemoveAll(dir)
		_ = os.RemoveAll(trainerCertDir)
	}
	kubeconfig, err := writeKubeconfig(cp, dir)
	if err != nil {
		return stop, err
	}
	jobsetArgs, jobsetProbe, jobsetHook, err := jobsetArgs(dir, kubeconfig)
	if err != nil {
		return stop, err
	}
	if err := registerJobSetWebhooks(ctx, cp, jobsetHook, filepath.Join(dir, "jobset-certs", "tls.crt")); err != nil {
		return stop, err
	}
	trainerArgs, trainerProbe, err := trainerArgs(rel, dir, kubeconfig)
	if err != nil {
		return stop, err
	}
	for _, c := range []struct {
		bin, log string
		args     []string
	}{
		{b.jobset, "jobset.log", jobsetArgs},
		{b.trainer, "trainer.log", trainerArgs},
	} {
		p, err := startProcess(ctx, c.bin, filepath.Join(dir, c.log), c.args)
		if err != nil {
			return stop, err
		}
		procs = append(procs, p)
	}
	go mountTrainerCerts(ctx, cp)
	for name, probe := range map[string]string{"jobset": jobsetProbe, "trainer": trainerProbe} {
		if err := waitReady(ctx, probe, filepath.Join(dir, name+".log")); err != nil {
			return stop, fmt.Errorf("%s controller: %w", name, err)
		}
	}
	return stop, nil
}

func writeKubeconfig(cp *controlplane.ControlPlane, dir string) (string, error) {
	user, err := cp.Env.AddUser(envtest.User{Name: "controllers", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, kc, 0o600)
}

// trainerArgs configures Trainer's controller manager: metrics off, no
// leader election, free ports for its probes and webhook server. v2.0
// takes flags; from v2.1 the settings live in a Configuration file
// (cmd/trainer-controller-manager, pkg/apis/config/v1alpha1), with the
// defaults (certificate management on, Secret
// kubeflow-trainer-webhook-cert, Service kubeflow-trainer-controller-manager)
// the flags had.
func trainerArgs(rel release, dir, kubeconfig string) (args []string, probe string, err error) {
	probe, err = controlplane.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	hook, err := controlplane.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	_, port, _ := net.SplitHostPort(hook)
	if !rel.configFile {
		return []string{"--kubeconfig=" + kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=" + probe, "--webhook-server-port=" + port}, probe, nil
	}
	cfg := fmt.Sprintf(`apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health: {healthProbeBindAddress: "%s"}
metrics: {bindAddress: "0"}
webhook: {port: %s, host: 127.0.0.1}
`, probe, port)
	path := filepath.Join(dir, "trainer-config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, "", err
	}
	return []string{"--kubeconfig=" + kubeconfig, "--config=" + path}, probe, nil
}

// jobsetArgs configures JobSet without its internal certificate
// management (which would need its Service): its webhook server gets a
// certificate of the suite's own and is not registered with the API server.
func jobsetArgs(dir, kubeconfig string) ([]string, string, string, error) {
	certDir := filepath.Join(dir, "jobset-certs")
	if err := writeSelfSigned(certDir); err != nil {
		return nil, "", "", err
	}
	probe, err := controlplane.FreeAddr()
	if err != nil {
		return nil, "", "", err
	}
	hook, err := controlplane.FreeAddr()
	if err != nil {
		return nil, "", "", err
	}
	_, port, _ := net.SplitHostPort(hook)
	cfg := fmt.Sprintf(`apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
health: {healthProbeBindAddress: "%s"}
metrics: {bindAddress: "0"}
webhook: {port: %s, host: 127.0.0.1, certDir: "%s"}
`, probe, port, certDir)
	path := filepath.Join(dir, "jobset-config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, "", "", err
	}
	return []string{"--kubeconfig=" + kubeconfig, "--config=" + path, "--health-probe-bind-address=" + probe, "--metrics-bind-address=0"}, probe, hook, nil
}

func writeSelfSigned(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jobset-webhook"}, NotBefore: time.Now().Add(-time.Minute),
		NotAfter: time.Now().Add(24 * time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}

func startProcess(ctx context.Context, bin, logPath string, args []string) (*exec.Cmd, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	return cmd, nil
}

func stopProcess(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// waitReady polls a controller's /readyz; on timeout the error carries the
// end of its log.
func waitReady(ctx context.Context, addr, logPath string) error {
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		if ok, _ := readyz(ctx, addr); ok {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	tail, _ := os.ReadFile(logPath)
	if len(tail) > 3000 {
		tail = tail[len(tail)-3000:]
	}
	return errors.New("not ready after 120s; log tail:\n" + string(tail))
}

// trainerCertDir is where Trainer's certificate rotator (pkg/util/cert: a
// constant in v2.0.0, a package variable no flag or setting reaches in
// v2.3.0) expects its Secret mounted, as the kubelet would. Being fixed, it
// is why two runs of this suite on one machine collide.
const trainerCertDir = "/tmp/k8s-webhook-server/serving-certs"

// mountTrainerCerts plays the kubelet's part for Trainer's webhook Secret:
// it copies the certificate the rotator stores into the directory the
// rotator and the webhook server read, and keeps it current.
func mountTrainerCerts(ctx context.Context, cp *controlplane.ControlPlane) {
	var last string
	for ctx.Err() == nil {
		var secret corev1.Secret
		err := cp.Client.Get(ctx, types.NamespacedName{Namespace: "kubeflow-system", Name: "kubeflow-trainer-webhook-cert"}, &secret)
		if err == nil && len(secret.Data["tls.crt"]) > 0 && len(secret.Data["tls.key"]) > 0 && string(secret.Data["tls.crt"]) != last {
			if writeCerts(secret.Data) == nil {
				last = string(secret.Data["tls.crt"])
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func writeCerts(data map[string][]byte) error {
	if err := os.MkdirAll(trainerCertDir, 0o700); err != nil {
		return err
	}
	// The key first: the rotator takes tls.crt's presence as "mounted".
	for _, name := range []string{"tls.key", "ca.crt", "tls.crt"} {
		tmp := filepath.Join(trainerCertDir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data[name], 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(trainerCertDir, name)); err != nil {
			return err
		}
	}
	return nil
}

// registerJobSetWebhooks registers JobSet's own defaulting and validating
// webhooks, served by the JobSet controller on loopback with the suite's
// certificate: JobSet's controller relies on its defaulting (e.g.
// spec.network) and fails on JobSets that did not go through it.
func registerJobSetWebhooks(ctx context.Context, cp *controlplane.ControlPlane, addr, caFile string) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"jobset.x-k8s.io"}, APIVersions: []string{"v1alpha2"}, Resources: []string{"jobsets"}},
	}}
	url := func(path string) *string { u := "https://" + addr + path; return &u }
	m := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "jobset-mutating-webhook-configuration"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mjobset.kb.io", Rules: rules, FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: url("/mutate-jobset-x-k8s-io-v1alpha2-jobset"), CABundle: ca}}}}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "jobset-validating-webhook-configuration"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "vjobset.kb.io", Rules: rules, FailurePolicy: &fail, SideEffects: &none, AdmissionReviewVersions: []string{"v1"},
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: url("/validate-jobset-x-k8s-io-v1alpha2-jobset"), CABundle: ca}}}}
	if err := cp.Client.Create(ctx, m); err != nil {
		return err
	}
	return cp.Client.Create(ctx, v)
}
