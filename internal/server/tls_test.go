package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-rl/sluice/internal/testfile"
	"github.com/sluice-rl/sluice/internal/testpki"
)

// issue signs a leaf certificate for 127.0.0.1 with the given DNS names
// and returns its certificate and key as PEM.
func issue(t *testing.T, c *testpki.CA, client bool, dnsNames ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	p := c.Issue(t, "leaf", []x509.ExtKeyUsage{usage}, append([]string{"127.0.0.1"}, dnsNames...)...)
	return p.CertPEM, p.KeyPEM
}

// callTLS dials addr with the given client TLS config and makes one call.
func callTLS(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, request("nope", "k", "v"))
	return err
}

func pool(pems ...[]byte) *x509.CertPool {
	p := x509.NewCertPool()
	for _, b := range pems {
		p.AppendCertsFromPEM(b)
	}
	return p
}

func TestTLSCertificateReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca1, ca2 := testpki.NewCA(t, "ca1"), testpki.NewCA(t, "ca2")
	cert, key := issue(t, ca1, false)
	testfile.Replace(t, certFile, string(cert))
	testfile.Replace(t, keyFile, string(key))
	st := newStack(t, testConfig, Options{TLS: &TLSFiles{CertFile: certFile, KeyFile: keyFile}}, nil)
	addr := st.srv.GRPCAddr()

	trusts1 := &tls.Config{RootCAs: pool(ca1.PEM())}
	trusts2 := &tls.Config{RootCAs: pool(ca2.PEM())}
	if err := callTLS(t, addr, trusts1); err != nil {
		t.Fatalf("call trusting ca1: %v", err)
	}
	if err := callTLS(t, addr, trusts2); err == nil {
		t.Fatal("call trusting only ca2 succeeded with a ca1 certificate")
	}

	// Renew with a certificate from ca2: new connections get it.
	cert, key = issue(t, ca2, false)
	testfile.Replace(t, keyFile, string(key))
	testfile.Replace(t, certFile, string(cert))
	if err := callTLS(t, addr, trusts2); err != nil {
		t.Errorf("call trusting ca2 after the renewal: %v", err)
	}
	if err := callTLS(t, addr, trusts1); err == nil {
		t.Error("call trusting only ca1 still succeeds after the renewal")
	}

	// A broken renewal keeps the last good certificate.
	testfile.Replace(t, certFile, "not a certificate")
	if err := callTLS(t, addr, trusts2); err != nil {
		t.Errorf("call after a broken renewal: %v (want the previous certificate kept)", err)
	}
}

func TestMutualTLS(t *testing.T) {
	p := newPKI(t, "envoy.example")
	st := newStack(t, testConfig, Options{TLS: p.files}, nil)
	tests := []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"client certificate with the SAN", p.envoy, true},
		{"no client certificate", nil, false},
		{"client certificate from another CA", clientCert(t, p.otherCA, "envoy.example"), false},
		{"client certificate without the SAN", clientCert(t, p.clientCA, "other.example"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := callTLS(t, st.srv.GRPCAddr(), &tls.Config{RootCAs: pool(p.serverCA.PEM()), Certificates: tt.certs})
			if (err == nil) != tt.ok {
				t.Errorf("call: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestTLSOptionErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		files TLSFiles
	}{
		{"no key", TLSFiles{CertFile: filepath.Join(dir, "c")}},
		{"missing files", TLSFiles{CertFile: filepath.Join(dir, "c"), KeyFile: filepath.Join(dir, "k")}},
		{"SAN without CA", TLSFiles{CertFile: "c", KeyFile: "k", ClientSAN: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Service: rlsv3.UnimplementedRateLimitServiceServer{}, TLS: &tt.files})
			if err == nil {
				t.Error("New: no error")
			}
		})
	}
}
