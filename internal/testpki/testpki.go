// Package testpki makes throw-away certificate authorities and certificates
// for tests: a CA, server certificates for loopback names, and client
// certificates, written as PEM files into a test's temporary directory.
//
// Keys are ECDSA P-256; certificates are valid from an hour ago for a day.
// Nothing here is fit for anything but tests.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// CA is a certificate authority whose certificate is in CertFile.
type CA struct {
	// CertFile is the CA's PEM certificate, the file clients and servers
	// are given to trust it.
	CertFile string

	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Pair names the PEM files of an issued certificate and its key.
type Pair struct{ CertFile, KeyFile string }

// NewCA makes a self-signed CA named name in a new temporary directory of t.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca := &CA{dir: t.TempDir()}
	ca.key = newKey(t)
	tmpl := template("sluice test CA " + name)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("create CA %s: %v", name, err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatalf("parse CA %s: %v", name, err)
	}
	ca.CertFile = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for localhost and 127.0.0.1.
func (ca *CA) Server(t testing.TB, name string) Pair {
	t.Helper()
	tmpl := template(name)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.DNSNames = []string{"localhost"}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	return ca.issue(t, name, tmpl)
}

// Client issues a client certificate whose subject alternative name is
// the DNS name san (and whose common name is name).
func (ca *CA) Client(t testing.TB, name, san string) Pair {
	t.Helper()
	tmpl := template(name)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if san != "" {
		tmpl.DNSNames = []string{san}
	}
	return ca.issue(t, name, tmpl)
}

// issue signs tmpl with the CA and writes name.pem and name-key.pem.
func (ca *CA) issue(t testing.TB, name string, tmpl *x509.Certificate) Pair {
	t.Helper()
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("issue %s: %v", name, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key of %s: %v", name, err)
	}
	p := Pair{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	writePEM(t, p.CertFile, "CERTIFICATE", der)
	writePEM(t, p.KeyFile, "EC PRIVATE KEY", kder)
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return key
}

// template is a certificate for cn with a random 62-bit serial number.
func template(cn string) *x509.Certificate {
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("write %s: %v", file, err)
	}
}
