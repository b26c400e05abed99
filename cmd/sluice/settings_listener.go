package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/server"
)

// listenerSettings are the HTTP listener's limits and who may reach a
// decision: over /json, and with refunds and limit overrides.
type listenerSettings struct {
	HTTPTLS           bool
	JSON              string // auto, on, off
	Privileged        string // any, trusted, none
	TrustedSANs       sanList
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxConnections    int
	MaxConnsPerAddr   int

	// The gRPC listener's bounds (server.GRPCLimits; 0: no bound).
	GRPCMaxStreams      int
	GRPCMaxHeaderBytes  int
	GRPCMaxConnections  int
	GRPCMaxConnsPerAddr int
	GRPCMaxIdle         time.Duration
	GRPCRequestTimeout  time.Duration
	MaxInFlight         int
	MaxInFlightPerConn  int
	GRPCMaxResets       int
}

// listenerFlags defines the listener settings on fs; bind records each
// flag's environment variable and returns the usage suffix naming it.
func listenerFlags(fs *flag.FlagSet, bind func(name, env string) string, l *listenerSettings) {
	fs.BoolVar(&l.HTTPTLS, "http-tls", false, "serve the HTTP port over TLS with the gRPC certificate, key and client CA; /json then requires a client certificate when GRPC_CLIENT_TLS_CACERT is set"+bind("http-tls", "SLUICE_HTTP_TLS"))
	l.JSON = "auto"
	fs.Var(&choiceValue{p: &l.JSON, allowed: []string{"auto", "on", "off"}}, "json",
		"serve /json: auto serves it unless gRPC requires client certificates and the HTTP port is plain HTTP (auto|on|off)"+bind("json", "SLUICE_JSON"))
	l.Privileged = "any"
	fs.Var(&choiceValue{p: &l.Privileged, allowed: []string{"any", "trusted", "none"}}, "privileged-requests",
		"who may send refunds (is_negative_hits) and limit overrides: anyone, callers with a trusted client certificate, or nobody (any|trusted|none)"+bind("privileged-requests", "SLUICE_PRIVILEGED_REQUESTS"))
	fs.Var(&l.TrustedSANs, "trusted-client-san", "SANs of trusted callers' client certificates, comma-separated; repeatable"+bind("trusted-client-san", "SLUICE_TRUSTED_CLIENT_SANS"))
	fs.DurationVar(&l.ReadHeaderTimeout, "http-read-header-timeout", server.DefaultHTTPReadHeaderTimeout, "HTTP: bound on reading a request's headers"+bind("http-read-header-timeout", "SLUICE_HTTP_READ_HEADER_TIMEOUT"))
	fs.DurationVar(&l.ReadTimeout, "http-read-timeout", server.DefaultHTTPReadTimeout, "HTTP: bound on reading a whole request, body included"+bind("http-read-timeout", "SLUICE_HTTP_READ_TIMEOUT"))
	fs.DurationVar(&l.WriteTimeout, "http-write-timeout", server.DefaultHTTPWriteTimeout, "HTTP: bound from the end of a request's headers to the end of its response"+bind("http-write-timeout", "SLUICE_HTTP_WRITE_TIMEOUT"))
	fs.DurationVar(&l.IdleTimeout, "http-idle-timeout", server.DefaultHTTPIdleTimeout, "HTTP: close a kept-alive connection idle this long"+bind("http-idle-timeout", "SLUICE_HTTP_IDLE_TIMEOUT"))
	fs.IntVar(&l.MaxConnections, "http-max-connections", server.DefaultHTTPMaxConnections, "HTTP: most open connections; more are closed at once"+bind("http-max-connections", "SLUICE_HTTP_MAX_CONNECTIONS"))
	fs.IntVar(&l.MaxConnsPerAddr, "http-max-connections-per-address", server.DefaultHTTPMaxConnectionsPerAddress,
		"HTTP: most open connections from one remote IP address; the last sixteenth of --http-max-connections is kept for addresses holding fewer than 4 (probes); 0 = no bound"+bind("http-max-connections-per-address", "SLUICE_HTTP_MAX_CONNECTIONS_PER_ADDRESS"))
	fs.IntVar(&l.GRPCMaxStreams, "grpc-max-concurrent-streams", server.DefaultGRPCMaxConcurrentStreams,
		"gRPC: most calls open on one connection, advertised to clients (Envoy opens another connection, gRPC clients queue); 0 = no bound"+bind("grpc-max-concurrent-streams", "SLUICE_GRPC_MAX_CONCURRENT_STREAMS"))
	fs.IntVar(&l.GRPCMaxHeaderBytes, "grpc-max-header-list-bytes", server.DefaultGRPCMaxHeaderListBytes,
		"gRPC: largest header list of a call, advertised to clients; a larger one is reset; 0 = gRPC's 16 MiB"+bind("grpc-max-header-list-bytes", "SLUICE_GRPC_MAX_HEADER_LIST_BYTES"))
	fs.IntVar(&l.GRPCMaxConnections, "grpc-max-connections", server.DefaultGRPCMaxConnections,
		"gRPC: most open connections; more are closed at once; 0 = no bound"+bind("grpc-max-connections", "SLUICE_GRPC_MAX_CONNECTIONS"))
	fs.IntVar(&l.GRPCMaxConnsPerAddr, "grpc-max-connections-per-address", server.DefaultGRPCMaxConnectionsPerAddress,
		"gRPC: most open connections from one remote IP address; the last sixteenth of --grpc-max-connections is kept for addresses holding fewer than 4 (probes); 0 = no bound"+bind("grpc-max-connections-per-address", "SLUICE_GRPC_MAX_CONNECTIONS_PER_ADDRESS"))
	fs.DurationVar(&l.GRPCMaxIdle, "grpc-max-connection-idle", server.DefaultGRPCMaxConnectionIdle,
		"gRPC: close a connection that has had no call this long (GOAWAY; the client reconnects when it needs to); 0 = never"+bind("grpc-max-connection-idle", "SLUICE_GRPC_MAX_CONNECTION_IDLE"))
	fs.IntVar(&l.MaxInFlight, "max-in-flight", server.DefaultMaxInFlight,
		"most calls open at once over all connections (gRPC and /json); more are answered ResourceExhausted (/json: 503) at once; 0 = no bound"+bind("max-in-flight", "SLUICE_MAX_IN_FLIGHT"))
	fs.IntVar(&l.MaxInFlightPerConn, "grpc-max-in-flight-per-connection", server.DefaultMaxInFlightPerConnection,
		"gRPC: most calls of --max-in-flight one connection may hold (health calls apart); more are answered ResourceExhausted at once; 0 = no bound of its own"+bind("grpc-max-in-flight-per-connection", "SLUICE_GRPC_MAX_IN_FLIGHT_PER_CONNECTION"))
	fs.IntVar(&l.GRPCMaxResets, "grpc-max-early-resets-per-second", server.DefaultGRPCMaxEarlyResetsPerSecond,
		"gRPC: close a connection that resets more calls than this, before their request, within a second (HTTP/2 rapid reset); Envoy's calls never count; 0 = no bound"+bind("grpc-max-early-resets-per-second", "SLUICE_GRPC_MAX_EARLY_RESETS_PER_SECOND"))
	fs.DurationVar(&l.GRPCRequestTimeout, "grpc-request-timeout", server.DefaultGRPCRequestTimeout,
		"gRPC: cancel (reset) a call whose request message has not arrived this long after its headers, giving back its slot; 0 = never"+bind("grpc-request-timeout", "SLUICE_GRPC_REQUEST_TIMEOUT"))
}

// validateListener checks the listener settings against the TLS ones; bad
// reports one error against a flag.
func (s *settings) validateListener(bad func(flag, format string, args ...any)) {
	l := &s.Listener
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"http-read-header-timeout", l.ReadHeaderTimeout}, {"http-read-timeout", l.ReadTimeout},
		{"http-write-timeout", l.WriteTimeout}, {"http-idle-timeout", l.IdleTimeout},
	} {
		if d.v <= 0 {
			bad(d.flag, "duration %v must be positive", d.v)
		}
	}
	if l.MaxConnections < 1 {
		bad("http-max-connections", "%d: must be at least 1", l.MaxConnections)
	}
	for _, b := range []struct {
		flag   string
		v, top int
	}{
		{"grpc-max-concurrent-streams", l.GRPCMaxStreams, math.MaxInt32},
		{"grpc-max-connections", l.GRPCMaxConnections, math.MaxInt32},
		{"grpc-max-connections-per-address", l.GRPCMaxConnsPerAddr, math.MaxInt32},
		{"http-max-connections-per-address", l.MaxConnsPerAddr, math.MaxInt32},
		{"max-in-flight", l.MaxInFlight, math.MaxInt32},
		{"grpc-max-in-flight-per-connection", l.MaxInFlightPerConn, math.MaxInt32},
		{"grpc-max-early-resets-per-second", l.GRPCMaxResets, math.MaxInt32},
	} {
		if b.v < 0 || b.v > b.top {
			bad(b.flag, "%d: must be from 0 (no bound) to %d", b.v, b.top)
		}
	}
	if d := l.GRPCRequestTimeout; d < 0 {
		bad("grpc-request-timeout", "duration %v: must be 0 (never) or positive", d)
	}
	if d := l.GRPCMaxIdle; d != 0 && d < time.Second {
		bad("grpc-max-connection-idle", "duration %v: must be 0 (never) or at least 1s", d)
	}
	if h := l.GRPCMaxHeaderBytes; h != 0 && (h < minHeaderListBytes || h > maxHeaderListBytes) {
		bad("grpc-max-header-list-bytes", "%d: must be 0 (gRPC's 16 MiB) or from %d to %d", h, minHeaderListBytes, maxHeaderListBytes)
	}
	if l.HTTPTLS && !s.GRPCUseTLS {
		bad("http-tls", "TLS on the HTTP port uses the gRPC TLS files: needs GRPC_SERVER_USE_TLS=true")
	}
	switch {
	case l.Privileged == "trusted" && s.GRPCClientCACert == "":
		bad("privileged-requests", "trusted needs GRPC_CLIENT_TLS_CACERT: a trusted caller is one with a client certificate it signed")
	case l.Privileged == "trusted" && len(l.TrustedSANs) == 0:
		bad("privileged-requests", "trusted needs SLUICE_TRUSTED_CLIENT_SANS: the SANs of the trusted callers' certificates")
	case l.Privileged != "trusted" && len(l.TrustedSANs) > 0:
		bad("trusted-client-san", "trusted SANs mean something only with SLUICE_PRIVILEGED_REQUESTS=trusted")
	}
}

// serverAccess is the server's access policy for these settings.
func (l *listenerSettings) serverAccess() server.Access {
	a := server.Access{HTTPTLS: l.HTTPTLS, TrustedSANs: l.TrustedSANs}
	switch l.JSON {
	case "on":
		a.JSON = server.JSONOn
	case "off":
		a.JSON = server.JSONOff
	}
	switch l.Privileged {
	case "trusted":
		a.Privileged = server.PrivilegedTrusted
	case "none":
		a.Privileged = server.PrivilegedNone
	}
	return a
}

// The range of --grpc-max-header-list-bytes: below 1 KiB even Envoy's
// ordinary headers of a call (path, authority, content type, timeout,
// trace context) may not fit; above 16 MiB is beyond gRPC's own bound.
const (
	minHeaderListBytes = 1 << 10
	maxHeaderListBytes = 16 << 20
)

// grpcLimits are the server's gRPC bounds for these settings.
func (l *listenerSettings) grpcLimits() server.GRPCLimits {
	return server.GRPCLimits{
		MaxConcurrentStreams:     uint32(l.GRPCMaxStreams),
		MaxHeaderListBytes:       uint32(l.GRPCMaxHeaderBytes),
		MaxConnections:           l.GRPCMaxConnections,
		MaxConnectionsPerAddress: l.GRPCMaxConnsPerAddr,
		MaxConnectionIdle:        l.GRPCMaxIdle,
		MaxInFlight:              l.MaxInFlight,
		MaxInFlightPerConnection: l.MaxInFlightPerConn,
		RequestTimeout:           l.GRPCRequestTimeout,
		MaxEarlyResetsPerSecond:  l.GRPCMaxResets,
	}
}

// httpLimits are the server's HTTP limits for these settings.
func (l *listenerSettings) httpLimits() server.HTTPLimits {
	return server.HTTPLimits{
		ReadHeaderTimeout:        l.ReadHeaderTimeout,
		ReadTimeout:              l.ReadTimeout,
		WriteTimeout:             l.WriteTimeout,
		IdleTimeout:              l.IdleTimeout,
		MaxConnections:           l.MaxConnections,
		MaxConnectionsPerAddress: l.MaxConnsPerAddr,
	}
}

// describeListeners is the start-up line saying what each port exposes.
func (s *settings) describeListeners() string {
	scheme := "http"
	if s.Listener.HTTPTLS {
		scheme = "https"
	}
	grpc := "plain"
	switch {
	case s.GRPCClientCACert != "":
		grpc = "TLS, client certificates required"
	case s.GRPCUseTLS:
		grpc = "TLS"
	}
	grpcAddr := net.JoinHostPort(s.GRPCHost, strconv.Itoa(s.GRPCPort))
	if s.GRPCUDS != "" {
		grpcAddr = "unix:" + s.GRPCUDS // GRPC_HOST:GRPC_PORT is not listened on
	}
	return fmt.Sprintf("gRPC %s (%s); HTTP %s://%s (json %s, privileged requests %s%s)",
		grpcAddr, grpc, scheme, net.JoinHostPort(s.HTTPHost, strconv.Itoa(s.HTTPPort)), s.Listener.JSON, s.Listener.Privileged,
		map[bool]string{true: ": " + strings.Join(s.Listener.TrustedSANs, ","), false: ""}[s.Listener.Privileged == "trusted"])
}

// sanList is a repeatable flag of comma-separated names.
type sanList []string

func (l *sanList) String() string { return strings.Join(*l, ",") }

func (l *sanList) Set(v string) error {
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			*l = append(*l, n)
		}
	}
	if len(*l) == 0 {
		return errors.New("no SAN given")
	}
	return nil
}
