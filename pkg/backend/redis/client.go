package redis

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// splitAuth splits "password" or "user:password".
func splitAuth(auth string) (user, pass string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// tlsConfig builds the TLS configuration, or nil when TLS is off.
func (o Options) tlsConfig(enabled bool) (*tls.Config, error) {
	if !enabled && !o.TLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLSCACert != "" {
		pem, err := os.ReadFile(o.TLSCACert)
		if err != nil {
			return nil, fmt.Errorf("read redis TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis TLS CA %s holds no PEM certificate", o.TLSCACert)
		}
		cfg.RootCAs = pool
	}
	if o.TLSClientCert != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSClientCert, o.TLSClientKey)
		if err != nil {
			return nil, fmt.Errorf("load redis TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if o.TLSSkipHostnameVerification {
		// Verify the chain ourselves, without a host name.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("redis TLS: server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			if err != nil {
				return fmt.Errorf("redis TLS: %w", err)
			}
			return nil
		}
	}
	return cfg, nil
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// checkHostPort validates a "host:port" address.
func checkHostPort(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("redis address %q: %w", addr, err)
	}
	return nil
}

// checkHostPorts validates every address of a list.
func checkHostPorts(addrs []string) error {
	for _, a := range addrs {
		if err := checkHostPort(a); err != nil {
			return err
		}
	}
	return nil
}

// newClient builds the go-redis client for o (already normalized): one
// UniversalOptions holds what every topology shares (credentials, TLS,
// timeouts, no retries of a command that may have run), and the topology
// picks its client from it. It does not connect: go-redis dials on first
// use, so a Redis that is down at start costs nothing here.
func newClient(o Options) (goredis.UniversalClient, error) {
	user, pass := splitAuth(o.Auth)
	u := &goredis.UniversalOptions{
		Username:     user,
		Password:     pass,
		PoolSize:     o.PoolSize,
		DialTimeout:  o.Timeout,
		ReadTimeout:  o.Timeout,
		WriteTimeout: o.Timeout,
		PoolTimeout:  o.Timeout,
		// A decide call writes: go-redis must not send it twice (decideCmd
		// says so too); a failed dial is retried once.
		MaxRetries:            -1,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		// Open-source Redis does not know the maintenance-notification
		// handshake.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	switch o.Type {
	case TypeSentinel:
		parts := splitList(o.URL)
		if len(parts) < 2 {
			return nil, fmt.Errorf("redis sentinel URL %q: want \"master,host:port[,host:port...]\"", o.URL)
		}
		if err := checkHostPorts(parts[1:]); err != nil {
			return nil, err
		}
		u.MasterName, u.Addrs = parts[0], parts[1:]
		u.SentinelUsername, u.SentinelPassword = splitAuth(o.SentinelAuth)
		tlsCfg, err := o.tlsConfig(false)
		if err != nil {
			return nil, err
		}
		u.TLSConfig = tlsCfg
		return goredis.NewFailoverClient(u.Failover()), nil
	case TypeCluster:
		addrs := splitList(o.URL)
		if len(addrs) == 0 {
			return nil, fmt.Errorf("redis cluster URL %q: want \"host:port,host:port,...\"", o.URL)
		}
		if err := checkHostPorts(addrs); err != nil {
			return nil, err
		}
		u.Addrs = addrs
		tlsCfg, err := o.tlsConfig(false)
		if err != nil {
			return nil, err
		}
		u.TLSConfig = tlsCfg
		return goredis.NewClusterClient(u.Cluster()), nil
	}
	return newSingleClient(o, u)
}

// newSingleClient builds the client of one server (Type single) from the
// shared options u: the URL says where it is and may carry credentials, a
// database and TLS (redis://, rediss://, unix://), or be a bare host:port
// or socket path.
func newSingleClient(o Options, u *goredis.UniversalOptions) (goredis.UniversalClient, error) {
	var ro *goredis.Options
	url := strings.TrimSpace(o.URL)
	isPath := strings.HasPrefix(url, "/")
	switch {
	case o.SocketType == "tcp" && (isPath || strings.HasPrefix(url, "unix://")):
		return nil, fmt.Errorf("redis URL %q is a unix socket, but socket type is tcp", o.URL)
	case o.SocketType == "unix" && !strings.HasPrefix(url, "unix://"):
		// As in envoyproxy/ratelimit, the URL is the socket path as given.
		ro = &goredis.Options{Network: "unix", Addr: url}
	case strings.HasPrefix(url, "redis://"), strings.HasPrefix(url, "rediss://"), strings.HasPrefix(url, "unix://"):
		var err error
		if ro, err = goredis.ParseURL(url); err != nil {
			return nil, fmt.Errorf("redis URL: %w", err)
		}
	case isPath:
		ro = &goredis.Options{Network: "unix", Addr: url}
	default:
		if err := checkHostPort(url); err != nil {
			return nil, err
		}
		ro = &goredis.Options{Network: "tcp", Addr: url}
	}
	tlsCfg, err := o.tlsConfig(ro.TLSConfig != nil)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil && ro.TLSConfig != nil && tlsCfg.ServerName == "" {
		tlsCfg.ServerName = ro.TLSConfig.ServerName
	}
	u.TLSConfig = tlsCfg
	u.Addrs, u.DB = []string{ro.Addr}, ro.DB
	if o.Auth == "" { // credentials of the URL, if any
		u.Username, u.Password = ro.Username, ro.Password
	}
	so := u.Simple()
	so.Network = ro.Network
	// What a redis:// URL's query may set besides the settings above.
	so.Protocol, so.ClientName, so.PoolFIFO = ro.Protocol, ro.ClientName, ro.PoolFIFO
	so.MinIdleConns, so.MaxIdleConns, so.MaxActiveConns = ro.MinIdleConns, ro.MaxIdleConns, ro.MaxActiveConns
	so.ConnMaxIdleTime, so.ConnMaxLifetime = ro.ConnMaxIdleTime, ro.ConnMaxLifetime
	return goredis.NewClient(so), nil
}
