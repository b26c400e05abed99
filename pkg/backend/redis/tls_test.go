package redis

import (
	"context"
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit/redistest"
	"github.com/sluice-rl/sluice/internal/testkit/testpki"
	"github.com/sluice-rl/sluice/pkg/backend"
)

// TestTLS runs decisions over TLS against redis-server's own TLS: chain
// and host name verification, skipping only the host name, and client
// certificates.
func TestTLS(t *testing.T) {
	// otherCA signed nothing here.
	ca, otherCA := testpki.NewCA(t, "redis"), testpki.NewCA(t, "other")
	client := ca.Client(t, "client", "")
	// One server whose certificate names 127.0.0.1, one that names only
	// another host (as managed Redis services often present), the latter
	// also requiring client certificates.
	serverAuth := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	goodPair := ca.Issue(t, "server-ip", serverAuth, "127.0.0.1")
	otherPair := ca.Issue(t, "server-other", serverAuth, "redis.internal.example")
	good := redistest.StandaloneTLS(t, redistest.TLS{CertFile: goodPair.CertFile, KeyFile: goodPair.KeyFile, CAFile: ca.CertFile})
	named := redistest.StandaloneTLS(t, redistest.TLS{CertFile: otherPair.CertFile, KeyFile: otherPair.KeyFile, CAFile: ca.CertFile, RequireClientCert: true})

	tests := []struct {
		name    string
		opts    Options
		wantErr string // "" means decisions succeed
	}{
		{"verified chain and IP", Options{URL: good.Addr(), TLS: true, TLSCACert: ca.CertFile}, ""},
		{"rediss:// URL", Options{URL: "rediss://" + good.Addr(), TLSCACert: ca.CertFile}, ""},
		{"unknown CA", Options{URL: good.Addr(), TLS: true, TLSCACert: otherCA.CertFile}, "certificate signed by unknown authority"},
		{"plain TCP to a TLS port", Options{URL: good.Addr()}, "unavailable"},
		{"host name mismatch", Options{URL: named.Addr(), TLS: true, TLSCACert: ca.CertFile, TLSClientCert: client.CertFile, TLSClientKey: client.KeyFile}, "127.0.0.1"},
		{"host name not verified", Options{URL: named.Addr(), TLS: true, TLSCACert: ca.CertFile, TLSClientCert: client.CertFile, TLSClientKey: client.KeyFile, TLSSkipHostnameVerification: true}, ""},
		{"host name not verified, chain still is", Options{URL: named.Addr(), TLS: true, TLSCACert: otherCA.CertFile, TLSClientCert: client.CertFile, TLSClientKey: client.KeyFile, TLSSkipHostnameVerification: true}, "unknown authority"},
		{"client certificate required", Options{URL: named.Addr(), TLS: true, TLSCACert: ca.CertFile, TLSSkipHostnameVerification: true}, "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Timeout = 2 * time.Second
			tt.opts.Breaker.Failures = -1
			b := newBackend(t, tt.opts)
			r := decideOne(b, "tls|a")
			if tt.wantErr == "" {
				if r.Err != nil {
					t.Fatalf("decide: %v", r.Err)
				}
				if err := b.Ping(context.Background()); err != nil {
					t.Fatalf("Ping: %v", err)
				}
				return
			}
			if !errors.Is(r.Err, backend.ErrUnavailable) || !strings.Contains(r.Err.Error(), tt.wantErr) {
				t.Fatalf("decide: %v; want ErrUnavailable mentioning %q", r.Err, tt.wantErr)
			}
		})
	}
}
