package xdstest

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"

	"github.com/sluice-rl/sluice/internal/testkit/testpki"
)

// Certs are the files of a test PKI: one CA, and one certificate signed by
// it that serves as both server and client certificate, as Envoy Gateway
// mounts one pair (tls.crt, tls.key) and its CA (ca.crt) in /certs.
type Certs struct {
	// Dir holds ca.crt, tls.crt and tls.key.
	Dir               string
	CACert, Cert, Key string
	caPool            *x509.CertPool
	pair              tls.Certificate
}

// NewCerts writes a CA and a certificate for names (DNS names or IP
// addresses) into a temporary directory.
func NewCerts(t testing.TB, names ...string) *Certs {
	t.Helper()
	ca := testpki.NewCA(t, "xdstest")
	p := ca.Issue(t, names[0], []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, names...)
	dir := t.TempDir()
	c := &Certs{Dir: dir, CACert: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"),
		caPool: ca.Pool(), pair: p.TLS(t)}
	testpki.WriteFile(t, c.CACert, ca.PEM())
	testpki.WriteFile(t, c.Cert, p.CertPEM)
	testpki.WriteFile(t, c.Key, p.KeyPEM)
	return c
}

// ServerTLS is a server configuration that presents the certificate and
// requires a client certificate signed by the CA, over TLS 1.3 only, as
// Envoy Gateway's rate-limit xDS server does (its crypto.LoadTLSConfig).
func (c *Certs) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.caPool,
	}
}

// ClientTLS is a client configuration that trusts the CA and presents the
// certificate.
func (c *Certs) ClientTLS(serverName string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.caPool, Certificates: []tls.Certificate{c.pair}, ServerName: serverName}
}
