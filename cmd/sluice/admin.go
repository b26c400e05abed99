package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/admin"
	"github.com/sluice-rl/sluice/internal/hitters"
	"github.com/sluice-rl/sluice/internal/rlqs"
	"github.com/sluice-rl/sluice/internal/server"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/redis"
)

// adminSettings are the SLUICE_ADMIN_* settings.
type adminSettings struct {
	Addr                   string // "off" disables the listener
	TLSCert, TLSKey, TLSCA string
	TokenFile              string
	// Peers and Advertise feed the live page's fleet view.
	Peers     string // comma-separated admin addresses of other instances
	Advertise string // this instance's admin address, announced in Redis
	Hosts     string // comma-separated names requests may carry as Host
	// TopMaxBytes bounds the heavy-hitter summaries' memory.
	TopMaxBytes int
}

// adminFlags defines the admin listener's flags with serveFlags' str.
func adminFlags(str func(p *string, name, env, def, usage string), integer func(p *int, name, env string, def int, usage string), a *adminSettings) {
	integer(&a.TopMaxBytes, "admin-top-max-bytes", "SLUICE_ADMIN_TOP_MAX_BYTES", hitters.DefaultMaxBytes,
		"most memory, in bytes, of the heavy-hitter summaries behind the live page and /api/v1/top; each kept descriptor is cut to its share (at least 1 MiB)")
	str(&a.Addr, "admin-addr", "SLUICE_ADMIN_ADDR", admin.DefaultAddr,
		`admin listener: live page, /rlconfig, pprof, counters API, gRPC reflection; "off" disables it. A non-loopback address needs a token file or a client CA`)
	str(&a.TLSCert, "admin-tls-cert", "SLUICE_ADMIN_TLS_CERT", "", "admin listener's TLS certificate file (TLS when set, re-read when it changes)")
	str(&a.TLSKey, "admin-tls-key", "SLUICE_ADMIN_TLS_KEY", "", "admin listener's TLS key file")
	str(&a.TLSCA, "admin-tls-client-cacert", "SLUICE_ADMIN_TLS_CLIENT_CACERT", "", "CA file; when set, admin clients must present a certificate it signed")
	str(&a.TokenFile, "admin-token-file", "SLUICE_ADMIN_TOKEN_FILE", "", "file holding the bearer token every admin request must present (re-read when it changes)")
	str(&a.Peers, "admin-peers", "SLUICE_ADMIN_PEERS", "", "comma-separated admin addresses (host:port or URLs) of the other instances, shown with this one in the live page's fleet view")
	str(&a.Hosts, "admin-hosts", "SLUICE_ADMIN_HOSTS", "", "comma-separated host names the admin listener answers in a request's Host besides IP addresses, localhost and the hosts of its own, peer and advertised addresses; other names are refused (DNS rebinding)")
	str(&a.Advertise, "admin-advertise", "SLUICE_ADMIN_ADVERTISE", "", "this instance's admin address as the other instances reach it (host:port or URL); with Redis it is announced there, so every instance's live page finds every other")
}

// adminPeers splits SLUICE_ADMIN_PEERS (and SLUICE_ADMIN_HOSTS).
func adminPeers(list string) []string {
	var out []string
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// adminWiring is what serve hands the admin listener.
type adminWiring struct {
	observer *admin.Observer
	top      *hitters.Tracker
	// quotas lists the Rate Limit Quota Service's buckets; nil when it
	// is off.
	quotas func() []rlqs.BucketView
}

// newAdminWiring builds the observer feeding the page and heavy hitters,
// or returns nil when the admin listener is off: then nothing shows them,
// and no decision pays for feeding them.
func newAdminWiring(s *settings) *adminWiring {
	if addr := adminAddrOf(s); addr == "off" || addr == "" {
		return nil
	}
	top := hitters.New(hitters.Options{MaxBytes: s.Admin.TopMaxBytes})
	return &adminWiring{observer: admin.NewObserver(top, nil), top: top}
}

// serviceObserver is what the service reports decisions to for the admin
// listener: nil (no observer at all) when the listener is off.
func (w *adminWiring) serviceObserver() service.Observer {
	if w == nil {
		return nil
	}
	return w.observer
}

// adminAddrOf is the admin listener's address: SLUICE_ADMIN_ADDR, or the
// deprecated SLUICE_DEBUG_ADDR when the former is left at its default.
func adminAddrOf(s *settings) string {
	if s.DebugAddr != "" && s.Admin.Addr == admin.DefaultAddr {
		return s.DebugAddr
	}
	return s.Admin.Addr
}

// startAdmin binds the admin listener unless it is off, and returns a
// function running it until ctx is done (nil when off).
func startAdmin(s *settings, log *logrus.Logger, w *adminWiring, svc *service.Service, b *backends,
	srv *server.Server, reloads func() admin.ReloadState) (func(context.Context), error) {
	addr := adminAddrOf(s)
	if s.DebugAddr != "" && s.Admin.Addr == admin.DefaultAddr {
		log.WithField("addr", s.DebugAddr).Warn(s.source["debug-addr"] + " is deprecated: it now sets the admin listener's address (SLUICE_ADMIN_ADDR)")
	}
	if addr == "off" || addr == "" || w == nil {
		log.Info("admin listener off")
		return nil, nil
	}
	var tlsFiles *server.TLSFiles
	switch {
	case s.Admin.TLSCert != "" || s.Admin.TLSKey != "":
		tlsFiles = &server.TLSFiles{CertFile: s.Admin.TLSCert, KeyFile: s.Admin.TLSKey, ClientCAFile: s.Admin.TLSCA}
	case s.Admin.TLSCA != "":
		return nil, fmt.Errorf("%s needs a certificate and key (%s, %s)", s.source["admin-tls-client-cacert"], s.source["admin-tls-cert"], s.source["admin-tls-key"])
	}
	var resetters []backend.Resetter
	for _, be := range []backend.Backend{b.main, b.local} {
		if r, ok := be.(backend.Resetter); ok {
			resetters = append(resetters, r)
		}
	}
	host, _ := os.Hostname()
	// With Redis every instance lists the others announced there, and
	// announces itself when it knows how the others reach it.
	var roster *redis.Roster
	if b.redis != nil {
		roster = b.redis.NewRoster(s.Admin.Advertise)
		if s.Admin.Advertise == "" {
			log.Info("admin: SLUICE_ADMIN_ADVERTISE unset: this instance is not announced to the other instances' fleet view")
		}
	}
	kind := s.backend()
	if kind == "redis" {
		kind = "redis " + cmp.Or(s.Redis.Type, "single")
	}
	a, err := admin.New(admin.Options{
		Addr:      addr,
		TLS:       tlsFiles,
		TokenFile: s.Admin.TokenFile,
		Looker:    svc,
		Backend:   b.main,
		Resetters: resetters,
		Observer:  w.observer,
		Top:       w.top,
		Info: admin.Info{Version: readBuildVersion().String(), Hostname: host, PID: os.Getpid(), Started: time.Now().UTC(), Backend: kind,
			Listeners: map[string]string{
				"grpc": srv.GRPCAddr(),
				"http": srv.HTTPAddr(),
			}},
		ConfigText: func() string { return svc.Config().Dump() },
		Reloads:    reloads,
		Quotas:     w.quotas,
		Reflection: srv,
		Logger:     log,
		Peers:      adminPeers(s.Admin.Peers),
		Directory:  directory(roster),
		Advertise:  s.Admin.Advertise,
		Hosts:      adminPeers(s.Admin.Hosts),
	})
	if err != nil && addr == admin.DefaultAddr && errors.Is(err, syscall.EADDRINUSE) {
		// Only the default: an address the operator chose must work.
		log.WithError(err).Error("admin listener NOT started: its default address is in use (another sluice on this host?); set SLUICE_ADMIN_ADDR to another address, or off")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) {
		var wg sync.WaitGroup
		if roster != nil {
			wg.Go(func() { roster.Run(ctx) })
		}
		if err := a.Serve(ctx); err != nil {
			log.WithError(err).Error("admin listener failed")
		}
		wg.Wait()
	}, nil
}

// directory is roster as the admin listener's Directory: nil (no
// discovery) without Redis.
func directory(roster *redis.Roster) admin.Directory {
	if roster == nil {
		return nil
	}
	return roster
}
