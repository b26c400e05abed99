package compat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/testpki"
)

// TestHealth: /healthcheck and the gRPC health service "ratelimit" as the
// incumbent answers them. Its health fails until its first Redis PING and
// then does not follow Redis (the incumbent binary, Redis stopped for 30 s:
// /healthcheck 200 throughout), unless REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
// makes it follow Redis's connections: unhealthy while Redis is down,
// healthy again when it is back. Envoy Gateway probes liveness on
// /healthcheck, so health that followed Redis by default would restart
// every pod during an outage.
func TestHealth(t *testing.T) {
	for _, c := range []struct {
		name   string
		env    map[string]string
		follow bool
	}{
		{"default", nil, false},
		{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", map[string]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION": "true"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := redistest.Standalone(t)
			this := variant{name: "redis", redis: true, env: func(*testing.T) map[string]string { return redisEnv(r.Addr()) }}
			env := map[string]string{"SLUICE_HEALTH_INTERVAL": "100ms"}
			for k, v := range c.env {
				env[k] = v
			}
			s := start(t, this, env, "runtime/ratelimit/config/basic.yaml")
			health := healthpb.NewHealthClient(s.Conn())
			check := func(service string) string {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
				if err != nil {
					return "error " + status.Code(err).String()
				}
				return resp.GetStatus().String()
			}
			httpCode := func() int {
				resp, err := http.Get("http://" + s.HTTPAddr() + "/healthcheck")
				if err != nil {
					t.Fatalf("GET /healthcheck: %v", err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}

			expect(t, "/healthcheck with Redis up", httpCode(), http.StatusOK)
			expect(t, `gRPC health "ratelimit" with Redis up`, check("ratelimit"), "SERVING")

			r.Kill()
			if c.follow {
				testenv.Until(t, 10*time.Second, "/healthcheck to fail with Redis down", func() bool { return httpCode() == http.StatusInternalServerError })
				expect(t, `gRPC health "ratelimit" with Redis down`, check("ratelimit"), "NOT_SERVING")
			} else {
				// The probe logs the failed ping and then reports health; a
				// call that fails (so Redis is down for the service too) is
				// answered after that report.
				testenv.Until(t, 10*time.Second, "the failed ping to be logged", func() bool { return strings.Contains(s.Logs(), "backend ping failed") })
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := s.Client().ShouldRateLimit(ctx, rq("basic", d("key1", "value1")))
				cancel()
				expect(t, "a call with Redis down", status.Code(err).String(), "Unavailable")
				expect(t, "/healthcheck with Redis down", httpCode(), http.StatusOK)
				expect(t, `gRPC health "ratelimit" with Redis down`, check("ratelimit"), "SERVING")
			}

			if err := r.Restart(); err != nil {
				t.Fatal(err)
			}
			testenv.Until(t, 10*time.Second, "/healthcheck to be OK", func() bool { return httpCode() == http.StatusOK })
			expect(t, `gRPC health "ratelimit" with Redis back`, check("ratelimit"), "SERVING")
		})
	}
}

// TestGRPCMutualTLS is the incumbent's Test_mTLS: with a server certificate
// and a client CA and SAN, a client with a certificate of that CA and SAN
// is served, and a client without one is not.
func TestGRPCMutualTLS(t *testing.T) {
	serverCA, clientCA := testpki.NewCA(t, "server"), testpki.NewCA(t, "client")
	srv := serverCA.Server(t, "sluice")
	s := start(t, memory, map[string]string{
		"GRPC_SERVER_USE_TLS":    "true",
		"GRPC_SERVER_TLS_CERT":   srv.CertFile,
		"GRPC_SERVER_TLS_KEY":    srv.KeyFile,
		"GRPC_CLIENT_TLS_CACERT": clientCA.CertFile,
		"GRPC_CLIENT_TLS_SAN":    "localhost",
	}, "runtime/ratelimit/config/basic.yaml")

	good := clientCA.Client(t, "envoy", "localhost")
	cert, err := tls.LoadX509KeyPair(good.CertFile, good.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := pool(t, serverCA.CertFile)
	served := func(cfg *tls.Config) string {
		conn, err := grpc.NewClient(s.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return "refused"
		}
		return "served"
	}
	expect(t, "client with a certificate of the client CA", served(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, ServerName: "localhost"}), "served")
	expect(t, "client without a certificate", served(&tls.Config{RootCAs: roots, ServerName: "localhost"}), "refused")
	wrongSAN := clientCA.Client(t, "intruder", "not-localhost")
	other, err := tls.LoadX509KeyPair(wrongSAN.CertFile, wrongSAN.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "client with another SAN", served(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{other}, ServerName: "localhost"}), "refused")
}

// TestGRPCServerCertReload is the incumbent's TestReloadGRPCServerCerts: the
// server's certificate files replaced on disk are served without a restart.
func TestGRPCServerCertReload(t *testing.T) {
	oldCA, newCA := testpki.NewCA(t, "old"), testpki.NewCA(t, "new")
	cur, next := oldCA.Server(t, "sluice"), newCA.Server(t, "sluice")
	s := start(t, memory, map[string]string{
		"GRPC_SERVER_USE_TLS":  "true",
		"GRPC_SERVER_TLS_CERT": cur.CertFile,
		"GRPC_SERVER_TLS_KEY":  cur.KeyFile,
	}, "runtime/ratelimit/config/basic.yaml")
	trusts := func(caFile string) bool {
		conn, err := tls.Dial("tcp", s.GRPCAddr(), &tls.Config{RootCAs: pool(t, caFile), ServerName: "localhost", NextProtos: []string{"h2"}})
		if err != nil {
			return false
		}
		conn.Close()
		return true
	}
	expect(t, "the old CA before the swap", trusts(oldCA.CertFile), true)
	expect(t, "the new CA before the swap", trusts(newCA.CertFile), false)

	if err := os.Rename(next.CertFile, cur.CertFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next.KeyFile, cur.KeyFile); err != nil {
		t.Fatal(err)
	}
	testenv.Until(t, 10*time.Second, "the new certificate to be served", func() bool { return trusts(newCA.CertFile) })
	expect(t, "the old CA after the swap", trusts(oldCA.CertFile), false)
}

// pool is a certificate pool holding the PEM file's certificates.
func pool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatalf("no certificate in %s", file)
	}
	return p
}
