package server

import (
	"context"
	"crypto/tls"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice/internal/testkit/testpki"
)

// pki is a server certificate and a client CA on disk, with client
// certificates to present.
type pki struct {
	files                       *TLSFiles
	serverCA, clientCA, otherCA *testpki.CA       // otherCA: one the server does not trust
	envoy, app, rogue           []tls.Certificate // SANs envoy.example, app.example; rogue: otherCA's
}

func newPKI(t *testing.T, clientSAN string) *pki {
	t.Helper()
	dir := t.TempDir()
	serverCA, clientCA, otherCA := testpki.NewCA(t, "server-ca"), testpki.NewCA(t, "client-ca"), testpki.NewCA(t, "other-ca")
	p := &pki{serverCA: serverCA, clientCA: clientCA, otherCA: otherCA, files: &TLSFiles{
		CertFile:     filepath.Join(dir, "tls.crt"),
		KeyFile:      filepath.Join(dir, "tls.key"),
		ClientCAFile: filepath.Join(dir, "client-ca.crt"),
		ClientSAN:    clientSAN,
	}}
	cert, key := issue(t, serverCA, false)
	testenv.ReplaceFile(t, p.files.CertFile, string(cert))
	testenv.ReplaceFile(t, p.files.KeyFile, string(key))
	testenv.ReplaceFile(t, p.files.ClientCAFile, string(clientCA.PEM()))
	p.envoy = clientCert(t, clientCA, "envoy.example")
	p.app = clientCert(t, clientCA, "envoy.example", "app.example")
	p.rogue = clientCert(t, otherCA, "envoy.example", "app.example")
	return p
}

// clientCert is a client certificate c issues for 127.0.0.1 and names,
// ready to present.
func clientCert(t *testing.T, c *testpki.CA, names ...string) []tls.Certificate {
	t.Helper()
	certPEM, keyPEM := issue(t, c, true, names...)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return []tls.Certificate{pair}
}

// client is an HTTP client trusting the server CA and presenting certs.
func (p *pki) client(certs []tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool(p.serverCA.PEM()), Certificates: certs},
	}}
}

// post sends body to url and returns the status and body; 0 and the error
// text when no response came (a refused handshake).
func post(c *http.Client, url, body string) (int, string) {
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const jsonReq = `{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`

// With client certificates required on gRPC, /json is never a way around
// them: off over plain HTTP unless turned on explicitly, and over HTTPS it
// requires the same certificate (and SAN) gRPC does. Health stays open to
// probes without a certificate.
func TestJSONBehindClientCertificates(t *testing.T) {
	p := newPKI(t, "envoy.example")
	type call struct {
		name    string
		https   bool
		certs   []tls.Certificate
		path    string
		want    int
		wantMsg string // a substring of the body
	}
	tests := []struct {
		name   string
		access Access
		calls  []call
	}{
		{"default, plain HTTP", Access{}, []call{
			{"json", false, nil, "/json", 403, "/json is off"},
			{"health", false, nil, "/healthcheck", 200, "OK"},
		}},
		{"json on explicitly, plain HTTP", Access{JSON: JSONOn}, []call{
			{"json", false, nil, "/json", 200, "OK"},
		}},
		{"json off", Access{JSON: JSONOff, HTTPTLS: true}, []call{
			{"json with certificate", true, p.envoy, "/json", 403, "turned off"},
		}},
		{"HTTPS", Access{HTTPTLS: true}, []call{
			{"json with certificate", true, p.envoy, "/json", 200, "OK"},
			{"json without certificate", true, nil, "/json", 403, "requires a client certificate"},
			// Go's client sends no certificate the server's CA list rejects.
			{"json with another CA's certificate", true, p.rogue, "/json", 403, "requires a client certificate"},
			{"health without certificate", true, nil, "/healthcheck", 200, "OK"},
			{"plain HTTP to the HTTPS port", false, nil, "/json", 400, "HTTPS"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newStack(t, testConfig, Options{TLS: p.files, Access: tt.access}, nil)
			for _, c := range tt.calls {
				t.Run(c.name, func(t *testing.T) {
					url := "http://" + st.srv.HTTPAddr() + c.path
					hc := &http.Client{Timeout: 10 * time.Second}
					if c.https {
						url = "https://" + st.srv.HTTPAddr() + c.path
						hc = p.client(c.certs)
					}
					code, body := post(hc, url, jsonReq)
					if code != c.want || !strings.Contains(body, c.wantMsg) {
						t.Fatalf("%s: %d %q, want %d containing %q", c.path, code, body, c.want, c.wantMsg)
					}
				})
			}
		})
	}
}

// A client certificate without the required SAN gets no /json either.
func TestJSONClientSAN(t *testing.T) {
	p := newPKI(t, "app.example")
	st := newStack(t, testConfig, Options{TLS: p.files, Access: Access{HTTPTLS: true}}, nil)
	url := "https://" + st.srv.HTTPAddr() + "/json"
	if code, body := post(p.client(p.envoy), url, jsonReq); code != 403 || !strings.Contains(body, `"app.example"`) {
		t.Fatalf("certificate without the SAN: %d %q, want 403 naming the SAN", code, body)
	}
	if code, body := post(p.client(p.app), url, jsonReq); code != 200 {
		t.Fatalf("certificate with the SAN: %d %q, want 200", code, body)
	}
}

// Refunds and limit overrides are refused, with PermissionDenied (403 on
// /json), from callers the policy does not trust, before anything is
// counted; ordinary requests are not affected.
func TestPrivilegedRequests(t *testing.T) {
	p := newPKI(t, "")
	plain := request("api", "k", "v")
	refund := request("api", "k", "v")
	refund.Descriptors[0].IsNegativeHits = true
	override := request("api", "k", "v")
	override.Descriptors[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100, Unit: 2}
	tests := []struct {
		name   string
		access Access
		certs  []tls.Certificate
		req    *rlsv3.RateLimitRequest
		ok     bool
	}{
		{"any: refund", Access{}, p.envoy, refund, true},
		{"any: override", Access{}, p.envoy, override, true},
		{"none: plain", Access{Privileged: PrivilegedNone}, p.app, plain, true},
		{"none: refund", Access{Privileged: PrivilegedNone}, p.app, refund, false},
		{"none: override", Access{Privileged: PrivilegedNone}, p.app, override, false},
		{"trusted: plain from untrusted", Access{Privileged: PrivilegedTrusted, TrustedSANs: []string{"app.example"}}, p.envoy, plain, true},
		{"trusted: refund from untrusted", Access{Privileged: PrivilegedTrusted, TrustedSANs: []string{"app.example"}}, p.envoy, refund, false},
		{"trusted: override from untrusted", Access{Privileged: PrivilegedTrusted, TrustedSANs: []string{"app.example"}}, p.envoy, override, false},
		{"trusted: refund from trusted", Access{Privileged: PrivilegedTrusted, TrustedSANs: []string{"x", "app.example"}}, p.app, refund, true},
		{"trusted: override from trusted", Access{Privileged: PrivilegedTrusted, TrustedSANs: []string{"app.example"}}, p.app, override, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.access.HTTPTLS = true
			st := newStack(t, testConfig, Options{TLS: p.files, Access: tt.access}, nil)
			cc, err := grpc.NewClient(st.srv.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(
				&tls.Config{RootCAs: pool(p.serverCA.PEM()), Certificates: tt.certs})))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			rls := rlsv3.NewRateLimitServiceClient(cc)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// Use up the limit of 2 per minute.
			for range 2 {
				if _, err := rls.ShouldRateLimit(ctx, plain); err != nil {
					t.Fatal(err)
				}
			}
			_, err = rls.ShouldRateLimit(ctx, tt.req)
			if tt.ok && err != nil {
				t.Fatalf("gRPC: %v, want it accepted", err)
			}
			if !tt.ok {
				if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "descriptor 0 is a") {
					t.Fatalf("gRPC: %v, want PermissionDenied naming the descriptor", err)
				}
				// Nothing was refunded: the limit is still used up.
				resp, err := rls.ShouldRateLimit(ctx, plain)
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("after the refused call: %v %v, want OVER_LIMIT (nothing refunded)", resp.GetOverallCode(), err)
				}
			}
			body, err := protojsonString(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			code, text := post(p.client(tt.certs), "https://"+st.srv.HTTPAddr()+"/json", body)
			if tt.ok == (code == 403) {
				t.Fatalf("/json: %d %q, want ok=%v", code, text, tt.ok)
			}
		})
	}
}

// A refund over plain /json is refused when only trusted callers may send
// one: a plain connection carries no certificate, so no trust.
func TestPrivilegedPlainJSON(t *testing.T) {
	p := newPKI(t, "")
	st := newStack(t, testConfig, Options{TLS: p.files, Access: Access{JSON: JSONOn, Privileged: PrivilegedTrusted, TrustedSANs: []string{"app.example"}}}, nil)
	code, body := st.do(t, "POST", "/json", `{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"is_negative_hits":true}]}`)
	if code != 403 || !strings.Contains(body, "refund") {
		t.Fatalf("refund over plain /json: %d %q, want 403", code, body)
	}
	if code, body := st.do(t, "POST", "/json", jsonReq); code != 200 {
		t.Fatalf("plain request over plain /json: %d %q, want 200", code, body)
	}
}

func TestAccessOptionErrors(t *testing.T) {
	p := newPKI(t, "")
	noCA := *p.files
	noCA.ClientCAFile = ""
	tests := []struct {
		name   string
		files  *TLSFiles
		access Access
		want   string
	}{
		{"HTTP TLS without TLS files", nil, Access{HTTPTLS: true}, "needs the gRPC TLS files"},
		{"trusted without a client CA", &noCA, Access{Privileged: PrivilegedTrusted, TrustedSANs: []string{"a"}}, "needs a client CA"},
		{"trusted without SANs", p.files, Access{Privileged: PrivilegedTrusted}, "at least one trusted SAN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Service: rlsv3.UnimplementedRateLimitServiceServer{}, TLS: tt.files, Access: tt.access})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func protojsonString(r *rlsv3.RateLimitRequest) (string, error) {
	b, err := protojson.Marshal(r)
	return string(b), err
}
