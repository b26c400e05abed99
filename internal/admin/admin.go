// Package admin is sluice's admin listener: an HTTP (and gRPC reflection)
// server on its own address, loopback by default, optionally behind TLS
// (with client certificates) and a bearer token. It serves what operators
// need and clients must not reach:
//
//	/                       the live page (page.go)
//	/rlconfig               the configuration in use, as text
//	/debug/pprof/           Go's profiler
//	/api/v1/status          instance, config, backend and rates, as JSON
//	/api/v1/counters        a descriptor's counters, without consuming (GET)
//	/api/v1/counters/reset  forget a descriptor's state (POST)
//	/api/v1/top             heavy hitters by denials or hits
//	/api/v1/fleet           every instance's status (fleet.go)
//	gRPC reflection         over HTTP/2 (grpcurl -plaintext, or with TLS)
//
// Counter lookups and resets are written to the log with who asked.
package admin

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/sluice-rl/sluice/internal/hitters"
	"github.com/sluice-rl/sluice/internal/logthrottle"
	"github.com/sluice-rl/sluice/internal/rlqs"
	"github.com/sluice-rl/sluice/internal/server"
	"github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// DefaultAddr is the admin listener's default address: the port the
// incumbent's debug listener uses, on loopback only.
const DefaultAddr = "127.0.0.1:6070"

// Looker resolves descriptors under the config in use (the service).
type Looker interface {
	Lookup(domain string, entries []descriptor.Entry) (service.Target, error)
	Config() *descriptor.Config
}

// Options configure a Server. Addr and Looker are required.
type Options struct {
	// Addr is the listen address, "host:port".
	Addr string
	// TLS, when not nil, serves over TLS (client certificates required
	// when it names a client CA).
	TLS *server.TLSFiles
	// TokenFile, when set, names a file holding the bearer token every
	// request must present (Authorization: Bearer <token>, or HTTP basic
	// authentication with the token as password, for browsers). The file
	// is read again when it changes.
	TokenFile string
	// Looker resolves descriptors for the counters API.
	Looker Looker
	// Backend answers counter lookups with peeks (cost 0: nothing
	// consumed). Resetters are the backends a reset goes to, in order (the
	// main backend, then the local fallback). Either may be nil: lookups or
	// resets are then refused with 501.
	Backend   backend.Backend
	Resetters []backend.Resetter
	// Observer holds the rates and heavy hitters; Top its tracker. Nil
	// serves empty lists.
	Observer *Observer
	Top      *hitters.Tracker
	// Info describes the instance for the page and /api/v1/status.
	Info Info
	// ConfigText returns the configuration dump served at /rlconfig.
	ConfigText func() string
	// Reloads returns the config reload state; nil means none to report.
	Reloads func() ReloadState
	// Quotas lists the Rate Limit Quota Service's buckets (GET
	// /api/v1/rlqs, the page); nil when the service is off.
	Quotas func() []rlqs.BucketView
	// Reflection lists the gRPC services the reflection service describes;
	// nil serves no reflection.
	Reflection reflection.ServiceInfoProvider
	// Hosts are names, besides IP addresses and localhost, that requests
	// may carry in their Host header (SLUICE_ADMIN_HOSTS); see guard.go.
	Hosts []string
	// Logger receives lifecycle lines and the audit log.
	Logger logrus.FieldLogger
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// Peers are the admin addresses ("host:port", or URLs) of the other
	// instances the fleet view asks (SLUICE_ADMIN_PEERS); Directory, when
	// not nil, finds more (the instances announced in the shared Redis).
	// Advertise is this instance's own address as the others reach it,
	// so that the view does not ask it twice.
	Peers     []string
	Directory Directory
	Advertise string
}

// Info describes the instance.
type Info struct {
	Version   string            `json:"version"`
	Hostname  string            `json:"hostname"`
	PID       int               `json:"pid"`
	Started   time.Time         `json:"started"`
	Backend   string            `json:"backend"`
	Listeners map[string]string `json:"listeners"`
}

// ReloadState is the configuration reload state.
type ReloadState struct {
	Successes, Failures      uint64
	LastSuccess, LastFailure time.Time
	LastError                error
}

// Server is the admin listener. Create it with New, then call Serve.
type Server struct {
	opts  Options
	log   logrus.FieldLogger
	ln    net.Listener
	http  *http.Server
	grpc  *grpc.Server
	token *tokenFile
	// tokenLog and refusedLog throttle the lines of requests refused for
	// an unreadable token file and for a missing or wrong token.
	tokenLog, refusedLog logthrottle.Log
	guardState

	verMu  sync.Mutex
	verCfg *descriptor.Config
	ver    string
}

// New binds the listener. A non-loopback address is refused unless a
// token file or client certificates protect it: the listener can reset
// counters and read the configuration.
func New(o Options) (*Server, error) {
	if o.Looker == nil {
		return nil, errors.New("admin: Options.Looker is nil")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{opts: o, log: o.Logger}
	s.tokenLog.Now, s.refusedLog.Now, s.guardLog.Now = o.Now, o.Now, o.Now
	s.hosts = allowedHosts(o)
	if s.log == nil {
		s.log = logrus.StandardLogger()
	}
	if o.TokenFile != "" {
		t, err := newTokenFile(o.TokenFile)
		if err != nil {
			return nil, err
		}
		s.token = t
	}
	var tlsCfg *tls.Config
	if o.TLS != nil {
		cfg, err := server.ServerTLS(*o.TLS, s.log)
		if err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
		tlsCfg = cfg
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin: listen on %s: %w", o.Addr, err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && s.token == nil && (o.TLS == nil || o.TLS.ClientCAFile == "") {
		ln.Close()
		return nil, fmt.Errorf("admin: %s is not a loopback address: set a token file or client certificates (a client CA) to protect it", o.Addr)
	}
	if tlsCfg != nil {
		tlsCfg.NextProtos = []string{"h2", "http/1.1"}
		ln = tls.NewListener(ln, tlsCfg)
	}
	s.ln = ln
	listeners := map[string]string{"admin": s.Addr()}
	for k, v := range o.Info.Listeners {
		if k != "admin" {
			listeners[k] = v
		}
	}
	s.opts.Info.Listeners = listeners

	if o.Reflection != nil {
		s.grpc = grpc.NewServer()
		ro := reflection.ServerOptions{Services: o.Reflection}
		reflectionv1.RegisterServerReflectionServer(s.grpc, reflection.NewServerV1(ro))
		reflectionv1alpha.RegisterServerReflectionServer(s.grpc, reflection.NewServer(ro))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.handlePage)
	mux.HandleFunc("GET /rlconfig", s.handleConfig)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /api/v1/status", s.handleStatus)
	mux.HandleFunc("GET /api/v1/counters", s.handleCountersGet)
	mux.HandleFunc("POST /api/v1/counters/reset", s.handleCountersReset)
	mux.HandleFunc("GET /api/v1/top", s.handleTop)
	mux.HandleFunc("GET /api/v1/fleet", s.handleFleet)
	mux.HandleFunc("GET /api/v1/rlqs", s.handleQuotas)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC reflection without TLS
	s.http = &http.Server{
		Handler:           s.guard(s.authenticate(s.route(mux))),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		Protocols:         protocols,
		ErrorLog:          nil,
	}
	return s, nil
}

// Addr is the address the listener bound.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until ctx is done, then closes the listener, giving open
// requests a second.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(s.ln) }()
	s.log.WithFields(logrus.Fields{"addr": s.Addr(), "tls": s.opts.TLS != nil, "token": s.token != nil}).
		Info("admin listener serving (/, /rlconfig, /debug/pprof/, /api/v1/, gRPC reflection)")
	select {
	case <-ctx.Done():
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("admin: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.http.Shutdown(sctx); err != nil {
		s.http.Close()
	}
	if s.grpc != nil {
		s.grpc.Stop()
	}
	return nil
}

// route sends gRPC (HTTP/2, application/grpc) to the reflection server
// and everything else to mux.
func (s *Server) route(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			if s.grpc == nil {
				http.Error(w, "no gRPC service on the admin listener", http.StatusNotFound)
				return
			}
			s.grpc.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// authenticate refuses requests without the token, when one is set.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.token == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want, err := s.token.get()
		if err != nil {
			s.tokenLog.Error(s.log, "admin: token file unreadable: refusing every request", err)
			http.Error(w, "admin token unavailable", http.StatusServiceUnavailable)
			return
		}
		got := ""
		if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
			got = strings.TrimPrefix(h, "Bearer ")
		} else if _, pw, ok := r.BasicAuth(); ok {
			got = pw
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			// A client can send these at any rate: one line per interval.
			s.refusedLog.Warn(s.log.WithFields(logrus.Fields{"remote": r.RemoteAddr, "path": r.URL.Path}), "admin: request without a valid token refused", nil)
			w.Header().Set("WWW-Authenticate", `Basic realm="sluice admin"`)
			http.Error(w, "a valid admin token is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handleConfig serves the configuration dump as text.
func (s *Server) handleConfig(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.opts.ConfigText != nil {
		fmt.Fprint(w, s.opts.ConfigText())
	}
}

// tokenFile is a bearer token read from a file, read again when the
// file's size or modification time changes.
type tokenFile struct {
	path string
	mu   sync.Mutex
	mod  time.Time
	size int64
	tok  []byte
}

func newTokenFile(path string) (*tokenFile, error) {
	t := &tokenFile{path: path}
	if _, err := t.get(); err != nil {
		return nil, err
	}
	return t, nil
}

// get returns the token, trimmed of surrounding white space. An empty
// token is an error: it would let anyone in.
func (t *tokenFile) get() ([]byte, error) {
	fi, err := os.Stat(t.path)
	if err != nil {
		return nil, fmt.Errorf("admin: token file: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tok != nil && fi.ModTime().Equal(t.mod) && fi.Size() == t.size {
		return t.tok, nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return nil, fmt.Errorf("admin: token file: %w", err)
	}
	tok := []byte(strings.TrimSpace(string(b)))
	if len(tok) == 0 {
		return nil, fmt.Errorf("admin: token file %s is empty", t.path)
	}
	t.tok, t.mod, t.size = tok, fi.ModTime(), fi.Size()
	return t.tok, nil
}
