package server

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
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
	return newLimitListener(ln, l.MaxConnections, "HTTP", log)
}

// limitListener closes connections accepted beyond a bound on the open
// ones, and counts the open ones.
type limitListener struct {
	net.Listener
	max  int64  // 0: no bound
	what string // the listener's name in the warning: "HTTP", "gRPC"
	log  logrus.FieldLogger
	open atomic.Int64
	full atomic.Bool // a refusal was logged since the listener was last below its bound
	// Refused counts the connections closed for being beyond the bound.
	refused atomic.Uint64
}

// newLimitListener bounds ln to max open connections (0: no bound, only
// counted); what names the listener in its warning.
func newLimitListener(ln net.Listener, max int, what string, log logrus.FieldLogger) *limitListener {
	return &limitListener{Listener: ln, max: int64(max), what: what, log: log}
}

// Accept returns the next connection within the bound, closing those
// beyond it.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); l.max <= 0 || n <= l.max {
			lc := &limitConn{Conn: c, release: l.release}
			lc.addr.addr = c.RemoteAddr()
			return lc, nil
		}
		l.open.Add(-1)
		// Counted before the close, so that whoever sees the connection
		// closed sees it counted too.
		l.refused.Add(1)
		c.Close()
		if l.full.CompareAndSwap(false, true) {
			l.log.WithFields(logrus.Fields{"max_connections": l.max, "addr": l.Addr().String()}).
				Warn(l.what + " listener at its connection limit: closing new connections until some close")
		}
	}
}

func (l *limitListener) release() {
	l.open.Add(-1)
	l.full.Store(false)
}

// limitConn gives its slot back once, when closed. Its remote address
// carries the count of the calls it holds (connAddr).
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
	addr    connAddr
}

// RemoteAddr is the connection's remote address, with its call count.
func (c *limitConn) RemoteAddr() net.Addr { return &c.addr }

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
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
