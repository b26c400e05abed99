package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writePKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate with the SAN envoy.example, all signed by the CA, to dir.
// It returns the file paths and the client key pair.
func writePKI(t *testing.T, dir string) (caFile, certFile, keyFile string, client tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage, dns ...string) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: dns}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile = write("ca.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	sc, sk := leaf(2, x509.ExtKeyUsageServerAuth)
	certFile, keyFile = write("tls.crt", sc), write("tls.key", sk)
	cc, ck := leaf(3, x509.ExtKeyUsageClientAuth, "envoy.example")
	client, err = tls.X509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	return caFile, certFile, keyFile, client
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
