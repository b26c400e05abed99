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
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
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
	pem  []byte

	mu     sync.Mutex
	issued map[string]int // certificates issued per name
}

// Pair is an issued certificate and its key: their PEM files, and the same
// PEM in memory.
type Pair struct {
	CertFile, KeyFile string
	CertPEM, KeyPEM   []byte
}

// TLS returns the pair as a tls.Certificate, for a client or a server
// configured in the test process.
func (p Pair) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatalf("load %s: %v", p.CertFile, err)
	}
	return c
}

// PEM returns the CA's certificate as PEM (the content of CertFile).
func (ca *CA) PEM() []byte { return ca.pem }

// Pool returns a certificate pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// NewCA makes a self-signed CA named name in a new temporary directory of t.
// A CA is safe for concurrent use.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca := &CA{dir: t.TempDir(), issued: map[string]int{}}
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
	ca.pem = writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for localhost and 127.0.0.1.
func (ca *CA) Server(t testing.TB, name string) Pair {
	t.Helper()
	return ca.Issue(t, name, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, "localhost", "127.0.0.1")
}

// Issue issues a certificate with common name name for the given extended
// key usages, whose subject alternative names are names: each an IP
// address, or else a DNS name.
func (ca *CA) Issue(t testing.TB, name string, usage []x509.ExtKeyUsage, names ...string) Pair {
	t.Helper()
	tmpl := template(name)
	tmpl.ExtKeyUsage = usage
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return ca.issue(t, name, tmpl)
}

// Expired issues a server certificate for localhost and 127.0.0.1 that
// expired an hour ago.
func (ca *CA) Expired(t testing.TB, name string) Pair {
	t.Helper()
	tmpl := template(name)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.DNSNames, tmpl.IPAddresses = []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}
	return ca.issue(t, name, tmpl)
}

// Client issues a client certificate whose subject alternative name is
// san (and whose common name is name); no SAN when san is "".
func (ca *CA) Client(t testing.TB, name, san string) Pair {
	t.Helper()
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if san == "" {
		return ca.Issue(t, name, usage)
	}
	return ca.Issue(t, name, usage, san)
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
	base := name
	ca.mu.Lock()
	if ca.issued[name] > 0 { // a name issued again gets files of its own
		base = fmt.Sprintf("%s-%d", name, ca.issued[name])
	}
	ca.issued[name]++
	ca.mu.Unlock()
	p := Pair{CertFile: filepath.Join(ca.dir, base+".pem"), KeyFile: filepath.Join(ca.dir, base+"-key.pem")}
	p.CertPEM = writePEM(t, p.CertFile, "CERTIFICATE", der)
	p.KeyPEM = writePEM(t, p.KeyFile, "EC PRIVATE KEY", kder)
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

// writePEM writes der as one PEM block of type typ to file and returns the
// PEM.
func writePEM(t testing.TB, file, typ string, der []byte) []byte {
	t.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	WriteFile(t, file, b)
	return b
}

// WriteFile writes data to file (mode 0600), for a test that wants a
// certificate or key under a name of its own.
func WriteFile(t testing.TB, file string, data []byte) {
	t.Helper()
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatalf("write %s: %v", file, err)
	}
}
