package redistest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Server is one standalone redis-server process.
type Server struct {
	proc *process
	root string
	tls  bool // the TCP port speaks TLS; Client uses the unix socket

	clients clientList
}

// Standalone starts a redis-server on a free loopback port (and a unix
// socket, see SocketPath) and stops it when t ends. args are extra
// redis-server command-line options, e.g. "--requirepass", "secret". It
// skips t if redis-server is not installed and fails t if the server does
// not start.
func Standalone(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := StartStandalone(args...)
	return started(t, "redis-server", s, err)
}

// StartStandalone is Standalone for callers without a testing.TB (a
// TestMain); the caller must Close the server.
func StartStandalone(args ...string) (*Server, error) {
	root, err := tempRoot()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(root, "redis.sock")
	conf := func(port, _ int) []string {
		return append(baseConfig(filepath.Join(root, "standalone"), port),
			"unixsocket "+sock, "unixsocketperm 700")
	}
	p, err := newProcess(root, "standalone", conf, false, false, args)
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	return &Server{proc: p, root: root}, nil
}

// TLS configures a standalone server that speaks TLS only on its TCP
// port (its unix socket stays plain, for the harness and for inspection).
type TLS struct {
	// CertFile and KeyFile are the server's PEM certificate and key.
	CertFile, KeyFile string
	// CAFile is the PEM CA that client certificates must chain to.
	CAFile string
	// RequireClientCert makes the server refuse clients without a
	// certificate signed by CAFile.
	RequireClientCert bool
}

// StandaloneTLS is Standalone with TLS on the TCP port (Addr). Client()
// talks over the plain unix socket.
func StandaloneTLS(t testing.TB, tlsFiles TLS, args ...string) *Server {
	t.Helper()
	s, err := StartStandaloneTLS(tlsFiles, args...)
	return started(t, "redis-server with TLS", s, err)
}

// StartStandaloneTLS is StandaloneTLS for callers without a testing.TB;
// the caller must Close the server.
func StartStandaloneTLS(tlsFiles TLS, args ...string) (*Server, error) {
	root, err := tempRoot()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(root, "redis.sock")
	auth := "no"
	if tlsFiles.RequireClientCert {
		auth = "yes"
	}
	conf := func(port, _ int) []string {
		c := append(baseConfig(filepath.Join(root, "standalone"), port),
			"unixsocket "+sock, "unixsocketperm 700",
			"port 0",
			"tls-port "+strconv.Itoa(port),
			"tls-cert-file "+tlsFiles.CertFile,
			"tls-key-file "+tlsFiles.KeyFile,
			"tls-auth-clients "+auth,
		)
		if tlsFiles.CAFile != "" {
			c = append(c, "tls-ca-cert-file "+tlsFiles.CAFile)
		}
		return c
	}
	ready := func() error { return pingNet("unix", sock) }
	p, err := newProcessReady(root, "standalone", conf, false, false, args, ready)
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	return &Server{proc: p, root: root, tls: true}, nil
}

// Addr is the server's "127.0.0.1:port".
func (s *Server) Addr() string { return s.proc.addr() }

// SocketPath is the server's unix socket.
func (s *Server) SocketPath() string { return filepath.Join(s.root, "redis.sock") }

// PID is the process id of the running server, 0 if it is not running.
func (s *Server) PID() int { return s.proc.pid() }

// Kill stops the server at once with SIGKILL, as a crash would, and waits
// for it to exit. Restart brings it back on the same port.
func (s *Server) Kill() { s.proc.kill() }

// Restart starts the server again on the same port after Kill. The data is
// gone (nothing is persisted), like a real restart without persistence. It
// returns an error if the port was taken meanwhile.
func (s *Server) Restart() error { return s.proc.restart() }

// Pause freezes the process (SIGSTOP): connections are accepted by the
// kernel but nothing is answered, as with a hung server. Resume undoes it.
func (s *Server) Pause() { s.proc.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.proc.signal(syscall.SIGCONT) }

// Client returns a new go-redis client for the server, closed with the
// server. Tests use it to inspect and change state directly.
func (s *Server) Client() *redis.Client {
	network, addr := "tcp", s.Addr()
	if s.tls {
		network, addr = "unix", s.SocketPath()
	}
	c := redis.NewClient(&redis.Options{
		Network:                  network,
		Addr:                     addr,
		DialTimeout:              2 * time.Second,
		ReadTimeout:              5 * time.Second,
		WriteTimeout:             5 * time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	s.clients.add(c)
	return c
}

// Close closes the clients handed out, stops the server by PID and removes
// its files. It is safe to call more than once.
func (s *Server) Close() {
	s.clients.closeAll()
	s.proc.stop()
	_ = os.RemoveAll(s.root)
}
