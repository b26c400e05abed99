package xdstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
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
	dir := t.TempDir()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "xdstest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := &Certs{Dir: dir, CACert: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{c.CACert, "CERTIFICATE", caDER}, {c.Cert, "CERTIFICATE", der}, {c.Key, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.caPool = x509.NewCertPool()
	c.caPool.AddCert(ca)
	if c.pair, err = tls.LoadX509KeyPair(c.Cert, c.Key); err != nil {
		t.Fatal(err)
	}
	return c
}

// ServerTLS is a server configuration that presents the certificate and
// requires a client certificate signed by the CA, as Envoy Gateway's
// rate-limit xDS server does.
func (c *Certs) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
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
