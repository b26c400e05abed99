package server

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/logthrottle"
)

// Defaults for the zero fields of HTTPLimits.
const (
	// DefaultHTTPReadHeaderTimeout bounds reading a request's headers.
	DefaultHTTPReadHeaderTimeout = 10 * time.Second
	// DefaultHTTPReadTimeout bounds reading a whole request, headers and
	// body: a /json body is at most MaxRequestBytes, sent at once by any
	// honest client.
	DefaultHTTPReadTimeout = 15 * time.Second
	// DefaultHTTPWriteTimeout bounds a request from the end of its headers
	// to the end of its response (the decision included).
	DefaultHTTPWriteTimeout = 30 * time.Second
	// DefaultHTTPIdleTimeout bounds how long a kept-alive connection waits
	// for its next request.
	DefaultHTTPIdleTimeout = 60 * time.Second
	// DefaultHTTPMaxConnections bounds the HTTP listener's open
	// connections.
	DefaultHTTPMaxConnections = 1024
	// DefaultHTTPMaxConnectionsPerAddress is the binary's bound on the
	// HTTP connections of one remote address: a quarter of the listener's,
	// so that no one client holds them all and the kubelet's probes,
	// which come from the node's address, find a place.
	DefaultHTTPMaxConnectionsPerAddress = DefaultHTTPMaxConnections / 4
)

// HTTPLimits bound what one client can hold on the HTTP listener, so that
// a client trickling its headers or body, or opening connections it never
// uses, cannot tie the listener up. Zero fields take the defaults above.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading the request line and headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, body included; a
	// client still sending when it runs out has its connection closed.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of the request headers to
	// the end of the response.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that sends no new request
	// for this long.
	IdleTimeout time.Duration
	// MaxConnections bounds the open connections. A connection accepted
	// beyond it is closed at once (the client sees the connection reset or
	// closed), and a warning is logged when the listener reaches the bound.
	MaxConnections int
	// MaxConnectionsPerAddress bounds the open connections of one remote
	// IP address; with it, the last sixteenth of MaxConnections is kept
	// for addresses that hold fewer than four, so that a prober (the
	// kubelet, from its node's address) is answered whatever other
	// clients hold. Zero,
	// unlike the other fields, means no such bound (and no reserve).
	MaxConnectionsPerAddress int
}

// withDefaults fills the zero fields.
func (l HTTPLimits) withDefaults() HTTPLimits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, DefaultHTTPReadHeaderTimeout)
	def(&l.ReadTimeout, DefaultHTTPReadTimeout)
	def(&l.WriteTimeout, DefaultHTTPWriteTimeout)
	def(&l.IdleTimeout, DefaultHTTPIdleTimeout)
	if l.MaxConnections <= 0 {
		l.MaxConnections = DefaultHTTPMaxConnections
	}
	return l
}

// Bound applies l's timeouts (zero fields: the defaults) to srv and
// returns ln bounded to l's connection count, for an HTTP listener other
// than the Server's own (a metrics listener, say). Serve srv on the
// returned listener.
func Bound(srv *http.Server, ln net.Listener, l HTTPLimits, log logrus.FieldLogger) net.Listener {
	l = l.withDefaults()
	srv.ReadHeaderTimeout, srv.ReadTimeout = l.ReadHeaderTimeout, l.ReadTimeout
	srv.WriteTimeout, srv.IdleTimeout = l.WriteTimeout, l.IdleTimeout
	return newLimitListener(ln, l.MaxConnections, l.MaxConnectionsPerAddress, "HTTP", log)
}

// limitListener closes connections accepted beyond a bound on the open
// ones, and on the open ones of one remote address, and counts the open
// ones.
type limitListener struct {
	net.Listener
	max  int64  // 0: no bound
	what string // the listener's name in the warning: "HTTP", "gRPC"
	log  logrus.FieldLogger
	open atomic.Int64
	full atomic.Bool // a refusal was logged since the listener was last below its bound
	// Refused counts the connections closed for being beyond the bound
	// (or their address's).
	refused atomic.Uint64

	// perAddr bounds one remote IP address's open connections, and
	// reserve places of max are kept for addresses that hold fewer than
	// reserveHeld
	// (0: no per-address bound; open is then counted without mu).
	perAddr, reserve int64
	mu               sync.Mutex // guards byAddr and orders open's changes with it
	byAddr           map[netip.Addr]int64
	addrThrottle     logthrottle.Log
}

// newLimitListener bounds ln to max open connections (0: no bound, only
// counted) and perAddr of one remote IP address (0: no bound); what names
// the listener in its warning.
func newLimitListener(ln net.Listener, max, perAddr int, what string, log logrus.FieldLogger) *limitListener {
	l := &limitListener{Listener: ln, max: int64(max), what: what, log: log}
	if perAddr > 0 {
		l.perAddr, l.reserve, l.byAddr = int64(perAddr), int64(max/16), map[netip.Addr]int64{}
	}
	return l
}

// Accept returns the next connection within the bounds, closing those
// beyond them.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip, keyed := remoteIP(c)
		why := l.admit(ip, keyed)
		if why == "" {
			lc := &limitConn{Conn: c, ip: ip, keyed: keyed, l: l}
			lc.addr.addr, lc.addr.calls.conn = c.RemoteAddr(), lc
			return lc, nil
		}
		// Counted before the close, so that whoever sees the connection
		// closed sees it counted too.
		l.refused.Add(1)
		c.Close()
		l.warn(why, ip)
	}
}

// reserveHeld is how many connections an address may hold and still be
// given one of the places kept in reserve: a node's kubelet may run its
// liveness, readiness and startup probes at once.
const reserveHeld = 4

// Refusals, as admit reports them.
const (
	refusedFull    = "full"
	refusedAddress = "address"
)

// admit takes a place for a connection from ip (keyed: ip is known),
// or says why not.
func (l *limitListener) admit(ip netip.Addr, keyed bool) string {
	if l.perAddr <= 0 {
		if n := l.open.Add(1); l.max <= 0 || n <= l.max {
			return ""
		}
		l.open.Add(-1)
		return refusedFull
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n, held := l.open.Load(), int64(0)
	if keyed {
		held = l.byAddr[ip]
	}
	switch {
	case l.max > 0 && n >= l.max:
		return refusedFull
	case keyed && held >= l.perAddr:
		return refusedAddress
	case l.max > 0 && n >= l.max-l.reserve && (held >= reserveHeld || !keyed):
		// The last places are for addresses that hold few.
		return refusedFull
	}
	if keyed {
		l.byAddr[ip] = held + 1
	}
	l.open.Add(1)
	return ""
}

// warn logs a refusal: once per episode of a full listener, throttled
// for an address at its own bound.
func (l *limitListener) warn(why string, ip netip.Addr) {
	if why == refusedAddress {
		l.addrThrottle.Warn(l.log.WithFields(logrus.Fields{"max_connections_per_address": l.perAddr, "remote": ip.String(), "addr": l.Addr().String()}),
			l.what+" listener: a remote address holds its share of the connections; closing its new ones until some close", nil)
		return
	}
	if l.full.CompareAndSwap(false, true) {
		l.log.WithFields(logrus.Fields{"max_connections": l.max, "addr": l.Addr().String()}).
			Warn(l.what + " listener at its connection limit: closing new connections until some close")
	}
}

// release gives back a place taken for a connection from ip.
func (l *limitListener) release(ip netip.Addr, keyed bool) {
	if l.perAddr > 0 {
		l.mu.Lock()
		if keyed {
			if n := l.byAddr[ip] - 1; n > 0 {
				l.byAddr[ip] = n
			} else {
				delete(l.byAddr, ip)
			}
		}
		l.open.Add(-1)
		l.mu.Unlock()
	} else {
		l.open.Add(-1)
	}
	l.full.Store(false)
}

// remoteIP is c's remote IP address, when it has one (TCP).
func remoteIP(c net.Conn) (netip.Addr, bool) {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// limitConn gives its place back once, when closed (before the close
// itself: whoever sees it closed finds its place free). Its remote address
// carries the count of the calls it holds (connAddr).
type limitConn struct {
	net.Conn
	once  sync.Once
	l     *limitListener
	ip    netip.Addr
	keyed bool
	addr  connAddr
}

// RemoteAddr is the connection's remote address, with its call count.
func (c *limitConn) RemoteAddr() net.Addr { return &c.addr }

func (c *limitConn) Close() error {
	c.once.Do(func() { c.l.release(c.ip, c.keyed) })
	return c.Conn.Close()
}

// debugWriter writes net/http's own error lines (a failed TLS handshake, a
// client that sent HTTP to the HTTPS port) to the log at debug level: they
// are the client's mistakes, frequent under scanners, and not the
// operator's concern.
type debugWriter struct{ log logrus.FieldLogger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.log.Debug(strings.TrimSpace(string(p)))
	return len(p), nil
}
