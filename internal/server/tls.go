package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-rl/sluice/internal/logthrottle"
)

// TLSFiles name the PEM files of the gRPC server's TLS. The files are read
// again whenever a connection is accepted and their content changed, so a
// renewed certificate (cert-manager, a rotated Secret) applies to new
// connections without a restart. A renewal that fails to parse is logged
// and the previous certificate stays in use.
type TLSFiles struct {
	// CertFile and KeyFile hold the server certificate chain and its key.
	CertFile, KeyFile string
	// ClientCAFile, when set, requires every client to present a
	// certificate signed by one of its CAs (mTLS).
	ClientCAFile string
	// ClientSAN, when set with ClientCAFile, also requires the client
	// certificate to carry this subject alternative name (DNS name, IP
	// address, URI or e-mail address).
	ClientSAN string
}

// certReloader holds the TLS config built from the last good content of
// the files, and rebuilds it when the content changes.
type certReloader struct {
	files TLSFiles
	log   logrus.FieldLogger
	// optional asks for a client certificate and verifies one that is
	// presented, but lets a connection without one through (the HTTP
	// listener: health probes and scrapers carry none; /json checks the
	// certificate itself).
	optional bool

	mu       sync.Mutex
	pems     [3][]byte // cert, key, CA: the content cfg was built from
	cfg      *tls.Config
	lastErr  string    // the last error logged, so a broken file is logged once
	notAfter time.Time // when cfg's certificate expires
	expired  bool      // its expiry has been logged
}

// expiryWarning is how long before its certificate expires a (re)load
// says so.
const expiryWarning = 7 * 24 * time.Hour

// newServerTLS returns a TLS config for the gRPC server whose certificate
// and client CAs follow the files. The first load must succeed.
func newServerTLS(f TLSFiles, log logrus.FieldLogger) (*tls.Config, error) {
	return newTLS(f, log, false)
}

// newHTTPTLS is newServerTLS for the HTTP listener: the same files, but a
// client certificate is verified only when presented (see
// certReloader.optional); the handlers that need one check it.
func newHTTPTLS(f TLSFiles, log logrus.FieldLogger) (*tls.Config, error) {
	return newTLS(f, log, true)
}

func newTLS(f TLSFiles, log logrus.FieldLogger, optional bool) (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("server: TLS needs both a certificate and a key file")
	}
	if f.ClientSAN != "" && f.ClientCAFile == "" {
		return nil, errors.New("server: a client SAN needs a client CA file")
	}
	r := &certReloader{files: f, log: log, optional: optional}
	if _, err := r.current(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg, err := r.current()
			if err != nil && cfg == nil {
				return nil, err
			}
			return cfg, nil
		},
	}, nil
}

// current reads the files and returns the config for their content,
// building it again only when the content changed. When the files cannot be
// read or parsed it logs the error and returns the last good config with
// the error (nil config if there is none).
func (r *certReloader) current() (*tls.Config, error) {
	pems, err := r.read()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil && r.cfg != nil && samePEMs(pems, r.pems) {
		r.checkExpiry()
		return r.cfg, nil
	}
	if err == nil {
		var cfg *tls.Config
		if cfg, err = r.build(pems); err == nil {
			if r.cfg != nil {
				r.log.WithField("cert", r.files.CertFile).Info("TLS certificate reloaded")
			}
			r.pems, r.cfg, r.lastErr = pems, cfg, ""
			r.notAfter, r.expired = cfg.Certificates[0].Leaf.NotAfter, false
			if left := time.Until(r.notAfter); left > 0 && left < expiryWarning {
				r.log.WithFields(logrus.Fields{"cert": r.files.CertFile, "not_after": r.notAfter}).
					Warnf("TLS certificate expires in %v: renew it (the renewed files are read without a restart)", left.Round(time.Minute))
			}
			r.checkExpiry()
			return cfg, nil
		}
	}
	r.checkExpiry()
	if r.cfg != nil && err.Error() != r.lastErr {
		r.lastErr = err.Error()
		r.log.WithError(err).Error("TLS files unusable; keeping the previous certificate")
	}
	return r.cfg, err
}

// checkExpiry logs, once per certificate, an error when the certificate
// in use has expired: clients then refuse every handshake, and nothing
// else on the server side would say why calls stopped. Callers hold r.mu.
func (r *certReloader) checkExpiry() {
	if r.cfg == nil || r.expired || time.Now().Before(r.notAfter) {
		return
	}
	r.expired = true
	r.log.WithFields(logrus.Fields{"cert": r.files.CertFile, "not_after": r.notAfter}).
		Error("TLS certificate expired: clients refuse every handshake; renew it (the renewed files are read without a restart)")
}

func samePEMs(a, b [3][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func (r *certReloader) read() ([3][]byte, error) {
	var pems [3][]byte
	names := [3]string{r.files.CertFile, r.files.KeyFile, r.files.ClientCAFile}
	for i, n := range names {
		if n == "" {
			continue
		}
		b, err := os.ReadFile(n)
		if err != nil {
			return pems, fmt.Errorf("server: read TLS file: %w", err)
		}
		pems[i] = b
	}
	return pems, nil
}

func (r *certReloader) build(pems [3][]byte) (*tls.Config, error) {
	cert, err := tls.X509KeyPair(pems[0], pems[1])
	if err == nil && cert.Leaf == nil {
		cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0])
	}
	if err != nil {
		return nil, fmt.Errorf("server: load TLS key pair %s, %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
	}
	if r.files.ClientCAFile == "" {
		return cfg, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pems[2]) {
		return nil, fmt.Errorf("server: client CA file %s holds no PEM certificate", r.files.ClientCAFile)
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.ClientCAs = pool
	if r.optional {
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		return cfg, nil
	}
	if san := r.files.ClientSAN; san != "" {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !hasSAN(cs.PeerCertificates[0], san) {
				return fmt.Errorf("client certificate does not carry the SAN %q", san)
			}
			return nil
		}
	}
	return cfg, nil
}

// hasSAN reports whether c names san among its subject alternative names.
func hasSAN(c *x509.Certificate, san string) bool {
	if slices.Contains(c.DNSNames, san) || slices.Contains(c.EmailAddresses, san) {
		return true
	}
	for _, ip := range c.IPAddresses {
		if ip.String() == san {
			return true
		}
	}
	for _, u := range c.URIs {
		if u.String() == san {
			return true
		}
	}
	return false
}

// handshakeLog is gRPC's TLS transport credentials, logging the
// handshakes that fail: gRPC drops such a connection without a word, and
// the client (Envoy, with failure_mode_deny false) then lets its requests
// through unlimited. One warning per logthrottle.Interval, counting the
// others, since a scanner or a misconfigured fleet can fail at any rate.
type handshakeLog struct {
	credentials.TransportCredentials
	log      logrus.FieldLogger
	throttle *logthrottle.Log
}

func newHandshakeLog(c credentials.TransportCredentials, log logrus.FieldLogger) *handshakeLog {
	return &handshakeLog{TransportCredentials: c, log: log, throttle: &logthrottle.Log{}}
}

// ServerHandshake is the wrapped credentials' handshake, logging a failure.
func (h *handshakeLog) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	out, info, err := h.TransportCredentials.ServerHandshake(conn)
	// EOF or a reset before a TLS record: a TCP probe (a TLS client that
	// fails says why with an alert first).
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		h.throttle.Warn(h.log.WithField("remote", conn.RemoteAddr().String()),
			"gRPC TLS handshake failed: the client got no connection (a client that does not trust the certificate, one without the client certificate required, an expired certificate)", err)
	}
	return out, info, err
}

// Clone returns a handshakeLog of a clone of the wrapped credentials,
// sharing the log and its throttle.
func (h *handshakeLog) Clone() credentials.TransportCredentials {
	return &handshakeLog{TransportCredentials: h.TransportCredentials.Clone(), log: h.log, throttle: h.throttle}
}
