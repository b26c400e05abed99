package redis

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/pkg/backend"
)

// pki is a throwaway CA with PEM files for a server and a client.
type pki struct {
	dir                   string
	caFile                string
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
	otherCAFile           string // a CA that signed nothing here
	clientCert, clientKey string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.ca, p.caKey, p.caFile = selfSigned(t, p.dir, "ca")
	_, _, p.otherCAFile = selfSigned(t, p.dir, "other-ca")
	p.clientCert, p.clientKey = p.issue(t, "client", nil, nil, x509.ExtKeyUsageClientAuth)
	return p
}

func selfSigned(t *testing.T, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	key, der := certify(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "sluice test " + name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name+".pem")
	writePEM(t, file, "CERTIFICATE", der)
	return cert, key, file
}

// issue signs a leaf certificate for the given names and returns its
// certificate and key files.
func (p *pki) issue(t *testing.T, name string, dns []string, ips []net.IP, usage x509.ExtKeyUsage) (string, string) {
	t.Helper()
	key, der := certify(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames:    dns,
		IPAddresses: ips,
	}, p.ca, p.caKey)
	certFile := filepath.Join(p.dir, name+".pem")
	keyFile := filepath.Join(p.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

// certify generates a key and a certificate of tmpl, valid from an hour ago
// for a day, signed by parent with parentKey, or self-signed when parent
// is nil. It returns the key and the certificate's DER.
func certify(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTLS runs decisions over TLS against redis-server's own TLS: chain
// and host name verification, skipping only the host name, and client
// certificates.
func TestTLS(t *testing.T) {
	p := newPKI(t)
	// One server whose certificate names 127.0.0.1, one that names only
	// another host (as managed Redis services often present), the latter
	// also requiring client certificates.
	goodCert, goodKey := p.issue(t, "server-ip", nil, []net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
	otherCert, otherKey := p.issue(t, "server-other", []string{"redis.internal.example"}, nil, x509.ExtKeyUsageServerAuth)
	good := redistest.StandaloneTLS(t, redistest.TLS{CertFile: goodCert, KeyFile: goodKey, CAFile: p.caFile})
	named := redistest.StandaloneTLS(t, redistest.TLS{CertFile: otherCert, KeyFile: otherKey, CAFile: p.caFile, RequireClientCert: true})

	tests := []struct {
		name    string
		opts    Options
		wantErr string // "" means decisions succeed
	}{
		{"verified chain and IP", Options{URL: good.Addr(), TLS: true, TLSCACert: p.caFile}, ""},
		{"rediss:// URL", Options{URL: "rediss://" + good.Addr(), TLSCACert: p.caFile}, ""},
		{"unknown CA", Options{URL: good.Addr(), TLS: true, TLSCACert: p.otherCAFile}, "certificate signed by unknown authority"},
		{"plain TCP to a TLS port", Options{URL: good.Addr()}, "unavailable"},
		{"host name mismatch", Options{URL: named.Addr(), TLS: true, TLSCACert: p.caFile, TLSClientCert: p.clientCert, TLSClientKey: p.clientKey}, "127.0.0.1"},
		{"host name not verified", Options{URL: named.Addr(), TLS: true, TLSCACert: p.caFile, TLSClientCert: p.clientCert, TLSClientKey: p.clientKey, TLSSkipHostnameVerification: true}, ""},
		{"host name not verified, chain still is", Options{URL: named.Addr(), TLS: true, TLSCACert: p.otherCAFile, TLSClientCert: p.clientCert, TLSClientKey: p.clientKey, TLSSkipHostnameVerification: true}, "unknown authority"},
		{"client certificate required", Options{URL: named.Addr(), TLS: true, TLSCACert: p.caFile, TLSSkipHostnameVerification: true}, "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Timeout = 2 * time.Second
			tt.opts.Breaker.Failures = -1
			b := newBackend(t, tt.opts)
			r := decideOne(b, "tls|a")
			if tt.wantErr == "" {
				if r.Err != nil {
					t.Fatalf("decide: %v", r.Err)
				}
				if err := b.Ping(context.Background()); err != nil {
					t.Fatalf("Ping: %v", err)
				}
				return
			}
			if !errors.Is(r.Err, backend.ErrUnavailable) || !strings.Contains(r.Err.Error(), tt.wantErr) {
				t.Fatalf("decide: %v; want ErrUnavailable mentioning %q", r.Err, tt.wantErr)
			}
		})
	}
}
