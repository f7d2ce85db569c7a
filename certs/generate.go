// Package certs creates and stores the webhook's serving certificates: a
// self-signed CA plus a serving certificate, for laptops (--dev-certs) and
// for clusters without cert-manager (self-managed mode).
package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// File names inside a cert dir. They follow the kubernetes.io/tls Secret
// keys, so a cert-manager Secret mounted whole works unchanged.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// Bundle is a CA and a serving certificate signed by it, PEM encoded.
type Bundle struct {
	CACert     []byte
	CAKey      []byte
	ServerCert []byte
	ServerKey  []byte
	// NotAfter is the serving certificate's expiry.
	NotAfter time.Time
}

// Options for Generate.
type Options struct {
	// DNSNames and IPs of the serving certificate.
	DNSNames []string
	IPs      []net.IP
	// Validity of both certificates; the CA lives twice as long.
	Validity time.Duration
	// Now is injectable so rotation can be tested without waiting.
	Now time.Time
}

// Generate creates a fresh CA and a serving certificate for opts.
func Generate(opts Options) (*Bundle, error) {
	opts = opts.withDefaults()
	ca, err := NewCA(2*opts.Validity, opts.Now)
	if err != nil {
		return nil, err
	}
	return ca.Issue(opts)
}

func (o Options) withDefaults() Options {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Validity <= 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	return o
}

// CA is a certificate authority and its key, parsed and PEM encoded.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA creates a self-signed CA valid from an hour before now for validity.
func NewCA(validity time.Duration, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "trainguard-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// ParseCA reads a CA certificate and its EC private key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, fmt.Errorf("CA key: no PEM block")
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !key.PublicKey.Equal(certs[0].PublicKey) {
		return nil, fmt.Errorf("CA key does not match the CA certificate")
	}
	return &CA{Cert: certs[0], Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// Issue signs a serving certificate for opts with ca. The bundle's CACert is ca's.
func (ca *CA) Issue(opts Options) (*Bundle, error) {
	opts = opts.withDefaults()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating serving key: %w", err)
	}
	cn := "trainguard"
	if len(opts.DNSNames) > 0 {
		cn = opts.DNSNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     opts.DNSNames,
		IPAddresses:  opts.IPs,
		NotBefore:    opts.Now.Add(-time.Hour),
		NotAfter:     opts.Now.Add(opts.Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing serving certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &Bundle{
		CACert:     ca.CertPEM,
		CAKey:      ca.KeyPEM,
		ServerCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		ServerKey:  keyPEM,
		NotAfter:   tmpl.NotAfter,
	}, nil
}

// EnsureDevCerts writes a fresh bundle into dir unless a serving pair is
// already there. It returns the CA PEM (for a webhook caBundle).
func EnsureDevCerts(dir string, opts Options) ([]byte, error) {
	if _, err := os.Stat(filepath.Join(dir, CertFile)); err == nil {
		ca, err := os.ReadFile(filepath.Join(dir, CAFile))
		if err != nil {
			return nil, fmt.Errorf("serving certificate exists in %s but its CA cannot be read: %w", dir, err)
		}
		return ca, nil
	}
	b, err := Generate(opts)
	if err != nil {
		return nil, err
	}
	if err := b.WriteDir(dir); err != nil {
		return nil, err
	}
	return b.CACert, nil
}

// WriteDir writes the serving pair and the CA into dir. Each file is
// written to a temp name and renamed, so a watcher never reads half a file;
// the key comes before the certificate, which is what watchers react to.
func (b *Bundle) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating cert dir: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{CAFile, b.CACert, 0o644}, {KeyFile, b.ServerKey, 0o600}, {CertFile, b.ServerCert, 0o644}} {
		if err := writeAtomic(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// ParseCertificates parses every CERTIFICATE block of a PEM bundle (a CA
// bundle may hold several during a rotation), in order.
func ParseCertificates(pemData []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := pemData; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing certificate %d: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no PEM certificate found")
	}
	return out, nil
}

// SameCA reports whether two PEM bundles are byte-identical after trimming.
func SameCA(a, b []byte) bool { return bytes.Equal(bytes.TrimSpace(a), bytes.TrimSpace(b)) }

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// After the rename this finds nothing; before it, it removes the
	// half-written temp file. Either way there is nothing to report.
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close() // the write error is the one to report
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		_ = tmp.Close() // the write error is the one to report
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		// crypto/rand never fails on supported platforms; a fixed serial still yields a valid cert.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
