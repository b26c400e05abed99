package admin

import (
	"context"
	"crypto/tls"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/sluice-rl/sluice/internal/logthrottle"
	"github.com/sluice-rl/sluice/internal/server"
	"github.com/sluice-rl/sluice/internal/testkit/testpki"
)

// TestAdminMTLS: with a client CA, a client without a certificate cannot
// connect, one with a certificate the CA signed can, and the audit log
// names its subject.
func TestAdminMTLS(t *testing.T) {
	ca := testpki.NewCA(t, "admin")
	srv, cli := ca.Server(t, "admin.test"), ca.Client(t, "oncall.example", "")
	logs := &testenv.SyncBuffer{}
	log := logrus.New()
	log.SetOutput(logs)
	f := newFixture(t, Options{TLS: &server.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.CertFile}, Logger: log})
	url := "https://" + f.admin.Addr() + "/api/v1/counters?domain=api&entry=user=bob"

	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	if resp, err := noCert.Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %s", resp.Status)
	}
	withCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cli.TLS(t)}}}}
	resp, err := withCert.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with a client certificate: %s", resp.Status)
	}
	if !strings.Contains(logs.String(), "client_cert=\"CN=oncall.example\"") {
		t.Errorf("the audit line does not name the client certificate:\n%s", logs)
	}
}

// TestAdminToken: a token file protects every path, as a bearer token or a
// basic-auth password; a changed file takes effect; an empty file at start
// is refused.
func TestAdminToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("one\n"), 0o600)
	f := newFixture(t, Options{TokenFile: file})
	basic := func(pw string) (int, string) {
		req, _ := http.NewRequest("GET", f.base+"/", nil)
		req.SetBasicAuth("any", pw)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("WWW-Authenticate")
	}
	for _, tc := range []struct {
		path, header string
		code         int
	}{
		{"/", "", 401},
		{"/rlconfig", "Bearer two", 401},
		{"/rlconfig", "Bearer one", 200},
		{"/debug/pprof/", "", 401},
		{"/api/v1/top", "Bearer one", 200},
	} {
		var h []string
		if tc.header != "" {
			h = []string{"Authorization", tc.header}
		}
		if code, _ := testenv.HTTPGet(t, f.base+tc.path, h...); code != tc.code {
			t.Errorf("GET %s %q: %d, want %d", tc.path, tc.header, code, tc.code)
		}
	}
	if code, challenge := basic("nope"); code != 401 || !strings.HasPrefix(challenge, "Basic") {
		t.Errorf("bad basic auth: %d %q, want 401 with a Basic challenge", code, challenge)
	}
	if code, _ := basic("one"); code != 200 {
		t.Errorf("basic auth with the token: %d", code)
	}
	os.WriteFile(file, []byte("three-rotated"), 0o600)
	if code, _ := testenv.HTTPGet(t, f.base+"/", "Authorization", "Bearer three-rotated"); code != 200 {
		t.Errorf("rotated token: %d, want 200", code)
	}
	if code, _ := testenv.HTTPGet(t, f.base+"/", "Authorization", "Bearer one"); code != 401 {
		t.Errorf("old token after rotation: %d, want 401", code)
	}

	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	if _, err := New(Options{Addr: "127.0.0.1:0", Looker: f.svc, TokenFile: empty}); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty token file: %v, want an error", err)
	}
}

// services is a reflection.ServiceInfoProvider listing fixed names.
type services []string

func (s services) GetServiceInfo() map[string]grpc.ServiceInfo {
	m := map[string]grpc.ServiceInfo{}
	for _, n := range s {
		m[n] = grpc.ServiceInfo{}
	}
	return m
}

// TestAdminReflection: gRPC reflection answers on the admin listener over
// plain HTTP/2, listing the services it is given.
func TestAdminReflection(t *testing.T) {
	f := newFixture(t, Options{Reflection: services{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"}})
	conn, err := grpc.NewClient(f.admin.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "envoy.service.ratelimit.v3.RateLimitService") {
		t.Errorf("reflection lists %v", names)
	}
}

// TestAdminRefusesOpenAddress: a non-loopback address needs a token or a
// client CA.
func TestAdminRefusesOpenAddress(t *testing.T) {
	f := newFixture(t, Options{})
	_, err := New(Options{Addr: "0.0.0.0:0", Looker: f.svc})
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("open non-loopback admin: %v, want refused", err)
	}
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("x"), 0o600)
	a, err := New(Options{Addr: "0.0.0.0:0", Looker: f.svc, TokenFile: file})
	if err != nil {
		t.Fatalf("non-loopback with a token: %v", err)
	}
	a.ln.Close()
}

// TestAdminRefusalsLogThrottled: requests refused for want of the token
// are logged at most once per interval, the next line counting those held
// back: a client sending them as fast as it can wrote a line each.
func TestAdminRefusalsLogThrottled(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("one\n"), 0o600)
	logs := &testenv.SyncBuffer{}
	log := logrus.New()
	log.SetOutput(logs)
	f := newFixture(t, Options{TokenFile: file, Logger: log})
	const line = "admin: request without a valid token refused"
	refuse := func(n int) {
		t.Helper()
		for range n {
			if code, _ := testenv.HTTPGet(t, f.base+"/rlconfig", "Authorization", "Bearer two"); code != 401 {
				t.Fatalf("GET with a wrong token: %d, want 401", code)
			}
		}
	}
	refuse(5)
	if got := strings.Count(logs.String(), line); got != 1 {
		t.Errorf("%d lines for 5 refusals within the interval, want 1:\n%s", got, logs)
	}
	f.clock.Advance(logthrottle.Interval)
	refuse(1)
	if got := strings.Count(logs.String(), line); got != 2 || !strings.Contains(logs.String(), "similar_warnings_held_back=4") {
		t.Errorf("after the interval: %d lines, want 2, the second counting 4 held back:\n%s", got, logs)
	}
}
