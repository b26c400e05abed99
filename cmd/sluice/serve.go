package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/internal/admin"
	"github.com/sluice-rl/sluice/internal/heapfloor"
	"github.com/sluice-rl/sluice/internal/metrics"
	"github.com/sluice-rl/sluice/internal/reload"
	"github.com/sluice-rl/sluice/internal/server"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// serve runs the service until ctx is done. It exits 2 on bad settings,
// 1 on an invalid initial config or a listener that cannot bind, and 0
// after a graceful shutdown.
func serve(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	return serveWith(ctx, args, nil, environ, stdout, stderr)
}

// serveAsIncumbent is serve run as envoyproxy/ratelimit's binary, which
// reads no argument: the arguments serve does not define (Envoy AI
// Gateway passes --quotaRateLimitServiceAddr=...) are ignored, and named
// in a warning; those it defines mean what they mean to serve.
func serveAsIncumbent(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	kept, ignored := incumbentArgs(args)
	return serveWith(ctx, kept, ignored, environ, stdout, stderr)
}

// serveWith is serve with args, and the ignored arguments to warn about.
func serveWith(ctx context.Context, args, ignored, environ []string, stdout, stderr io.Writer) int {
	s, err := parseServe(args, environ, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return exitUsage
	}
	if len(ignored) > 0 {
		s.warnings = append(s.warnings, fmt.Sprintf("ignoring %s: not arguments of sluice serve, and envoyproxy/ratelimit, whose binary this runs as, reads no argument (%q)",
			plural(len(ignored), "an argument", "arguments"), ignored))
	}
	log := newLogger(s, stderr)
	for _, name := range s.ignored {
		log.Warn("ignoring " + name + ", an envoyproxy/ratelimit setting sluice does not implement: " + referenceInstead(name))
	}
	for _, w := range s.warnings {
		log.Warn(w)
	}
	for _, n := range s.notes {
		log.Info(n)
	}
	gc := heapfloor.Start(uint64(s.GCHeapFloor), gogc(environ))
	defer gc.Stop()

	obs, err := newObservability(ctx, s, log)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return exitError
	}
	defer obs.shutdown(log)

	backends, err := newBackends(ctx, s, log, obs.batchObserver())
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return exitError
	}
	defer backends.close(log)
	for _, mb := range backends.memories() {
		if err := obs.registerMemory(mb.role, mb.b); err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return exitError
		}
	}
	if backends.cache != nil {
		if err := obs.registerDenyCache(backends.cache); err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return exitError
		}
	}
	if backends.announcer != nil {
		if err := obs.registerAnnouncements(backends.announcer); err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return exitError
		}
	}
	if backends.redis != nil {
		if err := obs.registerReplicas(backends.redis, s.Redis.Timeout); err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return exitError
		}
	}

	aw := newAdminWiring(s)
	svc := service.New(service.Options{
		Backend:                      obs.backend(backends.main),
		Local:                        backends.local,
		LocalInstances:               s.LocalInstances,
		ShadowMode:                   s.ShadowMode,
		QuotaMode:                    s.QuotaMode,
		AllOrNothing:                 s.AllOrNothing,
		ChargeOverLimit:              s.ChargeOverLimit,
		IgnoreOverrideUnitMultiplier: !s.OverrideUnitMultiplier,
		Bounds:                       s.requestBounds(),
		Headers: service.HeaderOptions{
			Enabled:         s.HeadersEnabled,
			LimitHeader:     s.LimitHeader,
			RemainingHeader: s.RemainingHeader,
			ResetHeader:     s.ResetHeader,
			IETF:            s.IETFHeaders,
			RetryAfter:      s.RetryAfter,

			Request:                s.RequestHeaders,
			RequestLimitHeader:     s.RequestLimitHeader,
			RequestRemainingHeader: s.RequestRemainingHeader,
			RequestResetHeader:     s.RequestResetHeader,
		},
		DynamicMetadata: s.DynamicMetadata,
		ResetMillis:     s.ResetMillis,
		Logger:          log,
		Observer:        admin.Tee(obs.observer(), aw.serviceObserver()),
	})

	// probe reports health; it exists once the server does, before any
	// reload after the first load.
	var probe *healthProbe
	onApply := func() {
		if probe != nil {
			probe.report()
		}
	}
	// The configuration comes from files (read now: an invalid one stops
	// the start) or over xDS (after the server starts; until it arrives
	// the gate answers Unavailable).
	var rls rlsv3.RateLimitServiceServer = svc
	var runConfig func(context.Context)
	var ready func() bool
	var reloads func() admin.ReloadState
	if s.ConfigSource.xdsEnabled() {
		src, err := newXDSSource(s, svc, obs, log, onApply)
		if err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return exitError
		}
		rls, runConfig, ready = src.gate, src.client.Run, src.ready(s.ConfigSource.ForceStart)
		reloads = src.stats
	} else {
		watcher, code := loadFiles(s, svc, obs, log, stderr, onApply)
		if watcher == nil {
			return code
		}
		runConfig = watcher.Run
		reloads = func() admin.ReloadState {
			st := watcher.Stats()
			return admin.ReloadState{Successes: st.Successes, Failures: st.Failures,
				LastSuccess: st.LastSuccess, LastFailure: st.LastFailure, LastError: st.LastError}
		}
	}

	var tlsFiles *server.TLSFiles
	if s.GRPCUseTLS {
		tlsFiles = &server.TLSFiles{CertFile: s.GRPCTLSCert, KeyFile: s.GRPCTLSKey,
			ClientCAFile: s.GRPCClientCACert, ClientSAN: s.GRPCClientTLSSAN}
	}
	interceptors, grpcOptions := obs.serverOptions()
	if s.StreamWorkers > 0 {
		grpcOptions = append(grpcOptions, grpc.NumStreamWorkers(uint32(s.StreamWorkers)))
	}
	if s.StaticWindows {
		grpcOptions = append(grpcOptions, staticWindows(s.MaxRequestBytes)...)
	}
	quota, err := newRLQS(s, backends, svc.Config, obs.registerer(), log)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return exitError
	}
	if aw != nil && quota != nil {
		aw.quotas = quota.Snapshot
	}
	srv, err := server.New(server.Options{
		GRPCAddr:              net.JoinHostPort(s.GRPCHost, strconv.Itoa(s.GRPCPort)),
		GRPCUnixSocket:        s.GRPCUDS,
		HTTPAddr:              net.JoinHostPort(s.HTTPHost, strconv.Itoa(s.HTTPPort)),
		Service:               rls,
		TLS:                   tlsFiles,
		MaxConnectionAge:      s.MaxConnectionAge,
		MaxConnectionAgeGrace: s.MaxConnectionAgeGrace,
		MaxRequestBytes:       s.MaxRequestBytes,
		OnRequestTooLarge:     func() { obs.metrics.RequestRefused(metrics.RequestBytesRefused) },
		HTTPLimits:            s.Listener.httpLimits(),
		GRPCLimits:            s.Listener.grpcLimits(),
		Access:                s.Listener.serverAccess(),
		DrainDelay:            s.DrainDelay,
		ShutdownTimeout:       s.ShutdownTimeout,
		UnaryInterceptors:     interceptors,
		GRPCOptions:           grpcOptions,
		Services:              rlqsServices(quota),
		Logger:                log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return exitError
	}
	obs.mount(srv, log)
	if err := obs.metrics.RegisterServerLoad(func() metrics.ServerCounts {
		l := srv.Load()
		return metrics.ServerCounts{InFlight: l.InFlight, Shed: l.Shed, ShedConnection: l.ShedConnection,
			RequestTimeouts: l.RequestTimeouts, ResetConnsClosed: l.ResetConnectionsClosed, Conns: l.Connections, ConnsRefused: l.ConnectionsRefused}
	}); err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return exitError
	}
	log.Info("listeners: " + s.describeListeners())

	probe = &healthProbe{
		backend:        backends.main,
		config:         svc.Config,
		set:            srv.SetServing,
		interval:       s.HealthInterval,
		log:            log,
		requireDomains: s.HealthyWithConfig,
		follow:         s.HealthFollowsBackend,
		ready:          ready,
	}
	probe.check(ctx) // before serving: a dead Redis is NOT_SERVING from the start

	if s.PrometheusAddr != "" && obs.reg != nil {
		prom, err := obs.startPrometheus(s.PrometheusAddr, s.PrometheusPath, s.Listener.httpLimits(), log)
		if err != nil {
			fmt.Fprintf(stderr, "sluice serve: %v\n", err)
			return exitError
		}
		defer prom.stop()
	}
	runAdmin, err := startAdmin(s, log, aw, svc, backends, srv, reloads)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return exitError
	}

	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { runConfig(bg) })
	wg.Go(func() { probe.run(bg) })
	if runAdmin != nil {
		wg.Go(func() { runAdmin(bg) })
	}
	err = srv.Serve(ctx)
	stop()
	wg.Wait()
	if err != nil {
		log.WithError(err).Error("server failed")
		return exitError
	}
	return exitOK
}

// loadFiles reads the configuration files and returns the watcher that
// reloads them, or nil and the exit code when the configuration is
// invalid or the watcher cannot be built.
// onApply runs after every configuration put in use, the first one
// included.
func loadFiles(s *settings, svc *service.Service, obs *observability, log *logrus.Logger, stderr io.Writer, onApply func()) (*reload.Watcher, int) {
	paths := s.configPaths()
	// FORCE_START_WITHOUT_INITIAL_CONFIG: config paths none of which
	// exist yet are an empty configuration, loaded when they appear (a
	// git-sync sidecar's first sync), as the incumbent does by default.
	// One path of several missing is still an error: only "nothing there
	// yet" is waited for.
	wait := s.ConfigSource.ForceStart
	loadOpts := descriptor.LoadOptions{MergeDomains: s.MergeDomains, DotFiles: s.DotFiles}
	watcher, err := reload.New(reload.Options{
		Paths:      paths,
		DotFiles:   s.DotFiles,
		Interval:   s.ReloadInterval,
		AllowEmpty: s.AllowEmptyReload,
		Refused:    func(error) { obs.metrics.ConfigLoadFailed() },
		Load: obs.load(func() (*descriptor.Config, error) {
			if wait && noneExist(paths) {
				return descriptor.Load(loadOpts)
			}
			return descriptor.Load(loadOpts, paths...)
		}),
		Apply: obs.apply(func(c *descriptor.Config) {
			for _, w := range c.Warnings() {
				log.Warn("config: " + w)
			}
			svc.SetConfig(c)
			onApply()
		}),
		Logger: log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return nil, exitError
	}
	if err := watcher.Load(); err != nil {
		n := printConfigErrors(stderr, err)
		fmt.Fprintf(stderr, "sluice serve: invalid configuration in %s (%d %s)\n",
			strings.Join(paths, ", "), n, plural(n, "error", "errors"))
		if !wait && noneExist(paths) {
			fmt.Fprintf(stderr, "sluice serve: to start without it and load it when it appears, as envoyproxy/ratelimit does, set FORCE_START_WITHOUT_INITIAL_CONFIG=true\n")
		}
		return nil, exitError
	}
	domains := svc.Config().Domains()
	if wait && noneExist(paths) {
		msg := "config path does not exist: serving without limits (every request is answered OK) until it appears (FORCE_START_WITHOUT_INITIAL_CONFIG)"
		if s.HealthyWithConfig {
			msg = "config path does not exist: health fails and every request is answered OK until it appears with a domain (FORCE_START_WITHOUT_INITIAL_CONFIG, HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)"
		}
		log.WithField("paths", paths).Warn(msg + ": " + strings.Join(paths, ", "))
		return watcher, exitOK
	}
	log.WithField("paths", paths).Infof("config loaded: %d %s %v", len(domains), plural(len(domains), "domain", "domains"), domains)
	if len(domains) == 0 {
		msg := "no domain configured: every request is answered OK until a config file appears"
		if s.HealthyWithConfig {
			msg = "no domain configured: health fails until a config file with a domain appears (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)"
		}
		log.WithField("paths", paths).Warn(msg)
	}
	return watcher, exitOK
}

// noneExist reports whether no path of paths exists (a dangling symlink
// does not): the configuration is not there yet. Any other error, such as
// a permission denied, is left for the load to report.
func noneExist(paths []string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}

// gogc returns the GC percentage the GOGC variable of environ sets, as
// the Go runtime reads it: -1 for "off", 100 when unset or not a number.
func gogc(environ []string) int {
	for _, kv := range environ {
		v, ok := strings.CutPrefix(kv, "GOGC=")
		if !ok {
			continue
		}
		if v == "off" {
			return -1
		}
		if n, err := strconv.ParseInt(v, 10, 32); err == nil {
			return int(n)
		}
		return 100
	}
	return 100
}

// newLogger builds the process logger: text, or JSON with the reference's
// @timestamp (to the nanosecond, RFC 3339) and @message fields.
func newLogger(s *settings, w io.Writer) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(w)
	l.SetLevel(s.LogLevel)
	if s.LogFormat == "json" {
		l.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano, FieldMap: logrus.FieldMap{
			logrus.FieldKeyTime: "@timestamp",
			logrus.FieldKeyMsg:  "@message",
		}})
	} else {
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	}
	return l
}

// staticWindows fixes gRPC's HTTP/2 flow-control windows: a stream's to
// the largest request sluice accepts, at least HTTP/2's 64 KiB and at most
// maxStaticStreamWindow, the connection's to maxStaticStreamWindow. With
// gRPC's default dynamic windows the server estimates the connection's
// bandwidth-delay product by sending a PING, and a connection
// WINDOW_UPDATE, each time data arrives with no estimate under way: once
// per round trip on every connection, forever, since small requests never
// grow the estimate to its bound. Envoy answers each one. Requests of a
// rate-limit service are small, so fixed windows cost them nothing, and
// the pings' frames and system calls are saved on both sides
// (docs/benchmarks.md, "What each default is worth"). A request larger
// than the stream's window is still read whole: gRPC opens the window to
// the length a message announces once its call reads it, one
// WINDOW_UPDATE more.
func staticWindows(maxRequestBytes int) []grpc.ServerOption {
	stream := int32(max(64<<10, min(maxRequestBytes, maxStaticStreamWindow)))
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(stream), grpc.StaticConnWindowSize(maxStaticStreamWindow)}
}

// maxStaticStreamWindow caps the fixed windows at 1 MiB whatever
// SLUICE_MAX_REQUEST_BYTES is (decision 0081): a window is what a client
// may send on a stream before sluice reads it, and no ordinary request
// comes near it.
const maxStaticStreamWindow = 1 << 20
