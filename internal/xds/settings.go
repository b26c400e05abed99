package xds

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Defaults of the settings, as envoyproxy/ratelimit's.
const (
	DefaultServerURL            = "localhost:18000"
	DefaultNodeID               = "default"
	DefaultConnectRetryInterval = 3 * time.Second
	DefaultBackoffInitial       = 10 * time.Second
	DefaultBackoffMax           = 60 * time.Second
	DefaultBackoffRandomFactor  = 0.5
	DefaultBackoffJitter        = true
)

// Settings are the xDS client's settings: envoyproxy/ratelimit's
// CONFIG_GRPC_XDS_* and XDS_CLIENT_* variables, with the same meanings and
// defaults.
type Settings struct {
	// ServerURL is the management server's address, host:port
	// (CONFIG_GRPC_XDS_SERVER_URL); any gRPC target works.
	ServerURL string
	// NodeID is the node id sent to the management server, which serves
	// the snapshot set for it (CONFIG_GRPC_XDS_NODE_ID).
	NodeID string
	// NodeMetadata is the node's metadata: "key=value" pairs separated by
	// commas (CONFIG_GRPC_XDS_NODE_METADATA); see ParseNodeMetadata.
	NodeMetadata string
	// ConnectRetryInterval is how long the gRPC connection waits between
	// two attempts to reach the server (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL),
	// with ±50% jitter.
	ConnectRetryInterval time.Duration
	// Headers are added to the stream's gRPC metadata
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers map[string]string

	// UseTLS connects over TLS (CONFIG_GRPC_XDS_SERVER_USE_TLS).
	UseTLS bool
	// ClientCert and ClientKey are the client certificate presented to the
	// server (CONFIG_GRPC_XDS_CLIENT_TLS_CERT, _KEY); both or neither.
	// They are read again at every handshake, so a rotated pair is used on
	// the next connection.
	ClientCert, ClientKey string
	// ServerCACert is a PEM file of CAs trusted for the server's
	// certificate besides the system roots (CONFIG_GRPC_XDS_SERVER_TLS_CACERT).
	ServerCACert string
	// ServerSAN is the name the server's certificate must carry, instead
	// of the host of ServerURL (CONFIG_GRPC_XDS_SERVER_TLS_SAN).
	ServerSAN string

	// BackoffInitial and BackoffMax bound the wait before a new stream
	// after the previous one failed: the first wait is BackoffInitial,
	// each further one doubles, up to BackoffMax
	// (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, _MAX_INTERVAL).
	BackoffInitial, BackoffMax time.Duration
	// BackoffRandomFactor spreads each wait over ±factor of itself when
	// BackoffJitter is on (XDS_CLIENT_BACKOFF_RANDOM_FACTOR, _JITTER).
	BackoffRandomFactor float64
	BackoffJitter       bool

	// MaxMsgSize bounds a response from the server, in bytes; 0 means
	// gRPC's default of 4 MiB (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES).
	MaxMsgSize int
}

// DefaultSettings returns the settings envoyproxy/ratelimit uses when none
// of its variables is set.
func DefaultSettings() Settings {
	return Settings{
		ServerURL:            DefaultServerURL,
		NodeID:               DefaultNodeID,
		ConnectRetryInterval: DefaultConnectRetryInterval,
		BackoffInitial:       DefaultBackoffInitial,
		BackoffMax:           DefaultBackoffMax,
		BackoffRandomFactor:  DefaultBackoffRandomFactor,
		BackoffJitter:        DefaultBackoffJitter,
	}
}

// Validate checks s without touching files; it returns every problem,
// each named by the environment variable that sets the field.
func (s *Settings) Validate() error {
	var errs []error
	if s.ServerURL == "" {
		errs = append(errs, errors.New("CONFIG_GRPC_XDS_SERVER_URL: the xDS server URL is empty"))
	}
	if s.ConnectRetryInterval <= 0 {
		errs = append(errs, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: connect retry interval %v must be positive", s.ConnectRetryInterval))
	}
	if s.BackoffInitial <= 0 {
		errs = append(errs, fmt.Errorf("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: backoff initial interval %v must be positive", s.BackoffInitial))
	}
	if s.BackoffMax < s.BackoffInitial {
		errs = append(errs, fmt.Errorf("XDS_CLIENT_BACKOFF_MAX_INTERVAL: backoff max interval %v is below the initial interval %v", s.BackoffMax, s.BackoffInitial))
	}
	if s.BackoffRandomFactor < 0 || s.BackoffRandomFactor > 1 {
		errs = append(errs, fmt.Errorf("XDS_CLIENT_BACKOFF_RANDOM_FACTOR: backoff random factor %v must be from 0 to 1", s.BackoffRandomFactor))
	}
	if s.MaxMsgSize < 0 {
		errs = append(errs, fmt.Errorf("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: max message size %d must not be negative", s.MaxMsgSize))
	}
	if _, err := ParseNodeMetadata(s.NodeMetadata); err != nil {
		errs = append(errs, fmt.Errorf("CONFIG_GRPC_XDS_NODE_METADATA: %w", err))
	}
	if (s.ClientCert == "") != (s.ClientKey == "") {
		errs = append(errs, errors.New("CONFIG_GRPC_XDS_CLIENT_TLS_CERT, CONFIG_GRPC_XDS_CLIENT_TLS_KEY: a client certificate needs both its cert and its key file"))
	}
	if !s.UseTLS && (s.ClientCert != "" || s.ClientKey != "" || s.ServerCACert != "" || s.ServerSAN != "") {
		errs = append(errs, errors.New("CONFIG_GRPC_XDS_CLIENT_TLS_*, CONFIG_GRPC_XDS_SERVER_TLS_*: xDS TLS files and SAN need CONFIG_GRPC_XDS_SERVER_USE_TLS=true"))
	}
	return errors.Join(errs...)
}

// ParseNodeMetadata parses "key=value,key2=value2" into a map, as
// envoyproxy/ratelimit does: each value is the text after the first '='.
// Unlike envoyproxy/ratelimit, which drops an entry without '=' without a
// word, such an entry is an error. Empty text gives an empty map.
func ParseNodeMetadata(s string) (map[string]string, error) {
	return parsePairs(s, "=", "node metadata entry %q is not key=value", func(k string) string { return k })
}

// ParseHeaders parses "name:value,name2:value2" (envoyproxy/ratelimit's
// format for CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS) into a map. An
// entry without ':' is an error, as there.
func ParseHeaders(s string) (map[string]string, error) {
	return parsePairs(s, ":", "header %q is not name:value", strings.ToLower)
}

// parsePairs parses comma-separated entries of a name, sep and a value
// into a map keyed by key(name); the value is the text after the first
// sep. An entry without sep or without a name is an error (bad formats it
// with the entry). Empty text gives an empty map.
func parsePairs(s, sep, bad string, key func(string) string) (map[string]string, error) {
	m := map[string]string{}
	if s == "" {
		return m, nil
	}
	for _, entry := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(entry, sep)
		if !ok || k == "" {
			return nil, fmt.Errorf(bad, entry)
		}
		m[key(k)] = v
	}
	return m, nil
}

// tlsConfig builds the client's TLS configuration: the system roots plus
// ServerCACert, the client certificate read at each handshake, and
// ServerSAN as the name to verify. It reads every file once now, so a
// missing or bad file fails at start, not at the first connection.
func (s *Settings) tlsConfig() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerSAN}
	if s.ServerCACert != "" {
		pem, err := os.ReadFile(s.ServerCACert)
		if err != nil {
			return nil, fmt.Errorf("xDS server CA: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("xDS server CA %s: no PEM certificate in it", s.ServerCACert)
		}
		c.RootCAs = pool
	}
	if s.ClientCert != "" {
		if _, err := tls.LoadX509KeyPair(s.ClientCert, s.ClientKey); err != nil {
			return nil, fmt.Errorf("xDS client certificate: %w", err)
		}
		certFile, keyFile := s.ClientCert, s.ClientKey
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("xDS client certificate: %w", err)
			}
			return &pair, nil
		}
	}
	return c, nil
}
