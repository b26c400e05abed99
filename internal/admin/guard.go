package admin

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/sirupsen/logrus"

	"github.com/sluice-rl/sluice/internal/logthrottle"
)

// The admin listener is meant for operators' tools (curl, the sluice
// CLI, a browser on the live page), mostly over loopback or
// `kubectl port-forward`. A web page the operator happens to have open
// must not reach it: a page from another origin may send a "simple"
// request (a form, or fetch with mode no-cors and a text/plain body)
// to any address without asking, and a page under a name the attacker's
// DNS points at 127.0.0.1 (DNS rebinding) is same-origin with the
// listener and may read its answers. So guard refuses, before anything
// else:
//   - a request whose Host is not an IP address, "localhost", a name
//     of Options.Hosts or the host of the listener's own address or of
//     one the fleet view uses (Options.Peers, Options.Advertise): a
//     rebinding page's Host is its own name;
//   - a request whose Origin, when it has one, is not the listener's own
//     origin (scheme and Host): a page of another origin;
//   - a state-changing request (any method but GET, HEAD and OPTIONS)
//     without a Content-Type of application/json (or application/grpc,
//     reflection's), which a page can send only after a CORS preflight
//     that the listener never approves, or the X-Sluice-Admin header.

// guardState is what guard keeps.
type guardState struct {
	hosts    map[string]struct{} // allowedHosts
	guarded  atomic.Uint64       // requests refused
	guardLog logthrottle.Log
}

// Refused counts the requests the listener refused as a web page's
// (Host, Origin or Content-Type).
func (s *Server) Refused() uint64 { return s.guarded.Load() }

// AdminHeader is the header that marks a state-changing admin request as
// sent by a tool, whatever its Content-Type.
const AdminHeader = "X-Sluice-Admin"

// hostAllowed reports whether host (a Host header, with or without a
// port) names the listener in a way no DNS-rebinding page can: an IP
// address, localhost, or a name the operator configured.
func (s *Server) hostAllowed(host string) bool {
	h := hostOnly(host)
	if h == "" {
		return false
	}
	if net.ParseIP(h) != nil || strings.EqualFold(h, "localhost") {
		return true
	}
	_, ok := s.hosts[strings.ToLower(h)]
	return ok
}

// hostOnly strips the port from a Host value, and an IPv6 address's
// brackets.
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}

// allowedHosts are the names guard accepts besides IP addresses and
// localhost: the listener's own address's, o.Hosts, and the hosts of the
// fleet's addresses.
func allowedHosts(o Options) map[string]struct{} {
	m := map[string]struct{}{}
	add := func(a string) {
		if u, err := url.Parse(a); err == nil && u.Host != "" {
			a = u.Host
		}
		if h := hostOnly(a); h != "" {
			m[strings.ToLower(h)] = struct{}{}
		}
	}
	add(o.Addr)
	for _, h := range o.Hosts {
		add(h)
	}
	for _, p := range o.Peers {
		add(p)
	}
	if o.Advertise != "" {
		add(o.Advertise)
	}
	return m
}

// guard refuses, with 403 and the reason, what a web page could send (see
// above), and passes the rest to next.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := s.refusal(r); why != "" {
			s.guardLog.Warn(s.log.WithFields(logrus.Fields{"remote": r.RemoteAddr, "host": r.Host,
				"origin": r.Header.Get("Origin"), "method": r.Method, "path": r.URL.Path}), "admin: request refused: "+why, nil)
			s.guarded.Add(1)
			http.Error(w, why, http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// refusal says why guard refuses r, or "".
func (s *Server) refusal(r *http.Request) string {
	if !s.hostAllowed(r.Host) {
		return "Host " + quote(r.Host) + " is not an address of this listener: use its IP address or localhost, or add the name to SLUICE_ADMIN_HOSTS"
	}
	if o := r.Header.Get("Origin"); o != "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		if !strings.EqualFold(o, scheme+"://"+r.Host) {
			return "Origin " + quote(o) + " is not this listener's (" + scheme + "://" + r.Host + "): the admin listener answers no other origin"
		}
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return ""
	}
	if r.Header.Get(AdminHeader) != "" {
		return ""
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "application/json" || strings.HasPrefix(mt, "application/grpc") {
		return ""
	}
	return r.Method + " needs Content-Type: application/json (or the " + AdminHeader + " header)"
}

// quote quotes a header value for a message, shortened.
func quote(v string) string {
	if len(v) > 100 {
		v = v[:100] + "..."
	}
	return `"` + v + `"`
}
