package main

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/testpki"
)

// writePKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate with the SAN envoy.example, all signed by the CA, to dir.
// It returns the file paths and the client key pair.
func writePKI(t *testing.T, dir string) (caFile, certFile, keyFile string, client tls.Certificate) {
	t.Helper()
	ca := testpki.NewCA(t, "ca")
	server := ca.Issue(t, "server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, "127.0.0.1")
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	testpki.WriteFile(t, caFile, ca.PEM())
	testpki.WriteFile(t, certFile, server.CertPEM)
	testpki.WriteFile(t, keyFile, server.KeyPEM)
	return caFile, certFile, keyFile, ca.Issue(t, "client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, "127.0.0.1", "envoy.example").TLS(t)
}

// The binary with gRPC client certificates required: /json is off over
// plain HTTP (with a warning), and over SLUICE_HTTP_TLS it requires the
// client certificate; the start-up log says what each port serves.
func TestServeJSONBehindClientCertificates(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(2))
	caFile, certFile, keyFile, client := writePKI(t, t.TempDir())
	mtls := []string{"SLUICE_CONFIG=" + dir, "GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + certFile,
		"GRPC_SERVER_TLS_KEY=" + keyFile, "GRPC_CLIENT_TLS_CACERT=" + caFile}
	const body = `{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`

	t.Run("plain HTTP", func(t *testing.T) {
		s := startServe(t, mtls)
		resp, err := http.Post("http://"+s.http+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(b), "/json is off") {
			t.Fatalf("/json: %d %q, want 403", resp.StatusCode, b)
		}
		log := s.stderr.String()
		if !strings.Contains(log, "/json is off: gRPC requires client certificates") || !strings.Contains(log, "client certificates required); HTTP http://") {
			t.Fatalf("log does not warn of /json or describe the listeners:\n%s", log)
		}
	})
	t.Run("HTTPS", func(t *testing.T) {
		s := startServe(t, append(mtls, "SLUICE_HTTP_TLS=true"))
		pool := x509.NewCertPool()
		caPEM, _ := os.ReadFile(caFile)
		pool.AppendCertsFromPEM(caPEM)
		for _, tc := range []struct {
			name  string
			certs []tls.Certificate
			path  string
			want  int
		}{
			{"json with certificate", []tls.Certificate{client}, "/json", 200},
			{"json without certificate", nil, "/json", 403},
			{"health without certificate", nil, "/healthcheck", 200},
		} {
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: tc.certs}}}
			resp, err := hc.Post("https://"+s.http+tc.path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
			}
		}
	})
}
