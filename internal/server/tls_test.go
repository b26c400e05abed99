package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-rl/sluice/internal/testkit/testpki"
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
	testenv.ReplaceFile(t, certFile, string(cert))
	testenv.ReplaceFile(t, keyFile, string(key))
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
	testenv.ReplaceFile(t, keyFile, string(key))
	testenv.ReplaceFile(t, certFile, string(cert))
	if err := callTLS(t, addr, trusts2); err != nil {
		t.Errorf("call trusting ca2 after the renewal: %v", err)
	}
	if err := callTLS(t, addr, trusts1); err == nil {
		t.Error("call trusting only ca1 still succeeds after the renewal")
	}

	// A broken renewal keeps the last good certificate.
	testenv.ReplaceFile(t, certFile, "not a certificate")
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

// TestTLSFailuresLogged: what makes clients refuse sluice's TLS, or sluice
// refuse theirs, is in sluice's log, where it used to be nowhere (gRPC
// drops a failed handshake in silence, and Envoy then lets its requests
// through unlimited): an expired certificate as an error once, one that
// expires within a week as a warning, a failed handshake as a warning. A connection closed before any byte (a TCP
// probe) and a good handshake log nothing.
func TestTLSFailuresLogged(t *testing.T) {
	// serverOnly is a valid server certificate and no client: the test
	// connects and closes without a handshake.
	serverOnly := func(t *testing.T) (*TLSFiles, *tls.Config) {
		ca := testpki.NewCA(t, "ca")
		p := ca.Server(t, "server")
		return &TLSFiles{CertFile: p.CertFile, KeyFile: p.KeyFile}, nil
	}
	const expiredLine = "TLS certificate expired: clients refuse every handshake"
	const handshakeLine = "gRPC TLS handshake failed"
	tests := []struct {
		name string
		// files builds the server's TLS files; client is the client's
		// TLS config, or nil to connect and close without a handshake.
		files func(t *testing.T) (*TLSFiles, *tls.Config)
		// reset closes the connection with a TCP reset before any byte.
		reset   bool
		wantOK  bool
		want    []string
		wantNot []string
	}{
		{
			name: "valid certificate",
			files: func(t *testing.T) (*TLSFiles, *tls.Config) {
				ca := testpki.NewCA(t, "ca")
				p := ca.Server(t, "server")
				return &TLSFiles{CertFile: p.CertFile, KeyFile: p.KeyFile}, &tls.Config{RootCAs: ca.Pool()}
			},
			wantOK: true,
			// testpki's certificates last a day: within the week
			// before expiry a (re)load says so.
			want:    []string{"TLS certificate expires in "},
			wantNot: []string{expiredLine, handshakeLine},
		},
		{
			name: "expired certificate",
			files: func(t *testing.T) (*TLSFiles, *tls.Config) {
				ca := testpki.NewCA(t, "ca")
				p := ca.Expired(t, "server")
				return &TLSFiles{CertFile: p.CertFile, KeyFile: p.KeyFile}, &tls.Config{RootCAs: ca.Pool()}
			},
			want: []string{expiredLine, handshakeLine},
		},
		{
			name: "client without the required certificate",
			files: func(t *testing.T) (*TLSFiles, *tls.Config) {
				p := newPKI(t, "")
				return p.files, &tls.Config{RootCAs: pool(p.serverCA.PEM())}
			},
			want:    []string{handshakeLine},
			wantNot: []string{expiredLine},
		},
		{
			name:    "connection reset before a handshake",
			files:   serverOnly,
			reset:   true,
			wantOK:  true,
			wantNot: []string{handshakeLine},
		},
		{
			name:    "connection closed before a handshake",
			files:   serverOnly,
			wantOK:  true,
			wantNot: []string{handshakeLine},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, client := tt.files(t)
			logs := &testenv.SyncBuffer{}
			log := logrus.New()
			log.SetOutput(logs)
			st := newStack(t, testConfig, Options{TLS: files, Logger: log}, nil)
			var err error
			if tt.reset {
				var conn net.Conn
				if conn, err = net.Dial("tcp", st.srv.GRPCAddr()); err == nil {
					conn.(*net.TCPConn).SetLinger(0) // close sends a reset
					conn.Close()
				}
			} else if client == nil {
				var conn net.Conn
				if conn, err = net.Dial("tcp", st.srv.GRPCAddr()); err == nil {
					conn.Close()
				}
			} else {
				err = callTLS(t, st.srv.GRPCAddr(), client)
			}
			if (err == nil) != tt.wantOK {
				t.Errorf("call: %v, want ok=%v", err, tt.wantOK)
			}
			// Stopping the server waits for its connections' handshakes, so
			// every line is written by then.
			if err := st.stop(); err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.want {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log lacks %q:\n%s", want, logs)
				}
			}
			for _, not := range tt.wantNot {
				if strings.Contains(logs.String(), not) {
					t.Errorf("log has %q:\n%s", not, logs)
				}
			}
		})
	}
}
