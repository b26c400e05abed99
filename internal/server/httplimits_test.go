package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// short are limits a test can outlast quickly.
var short = HTTPLimits{
	ReadHeaderTimeout: 200 * time.Millisecond,
	ReadTimeout:       300 * time.Millisecond,
	WriteTimeout:      2 * time.Second,
	IdleTimeout:       200 * time.Millisecond,
	MaxConnections:    3,
}

// closedWithin reports how long the server took to close c, reading (and
// discarding) whatever it sends, up to bound; ok is false if c is still
// open then.
func closedWithin(t *testing.T, c net.Conn, bound time.Duration) (time.Duration, bool) {
	t.Helper()
	begin := time.Now()
	c.SetReadDeadline(begin.Add(bound))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return bound, false
	}
	return time.Since(begin), true // EOF or reset: closed by the server
}

// Each way of holding an HTTP connection without finishing a request is
// cut by its timeout: the server closes the connection within a bound a
// little above the configured timeout, whatever the client keeps sending.
func TestHTTPSlowClients(t *testing.T) {
	cases := []struct {
		name string
		// hold runs on a fresh connection until the server closes it or
		// stop is closed.
		hold func(c net.Conn, stop <-chan struct{})
	}{
		{"headers trickled", func(c net.Conn, stop <-chan struct{}) {
			io.WriteString(c, "POST /json HTTP/1.1\r\nHost: x\r\n")
			trickle(c, "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", stop)
		}},
		{"body trickled", func(c net.Conn, stop <-chan struct{}) {
			io.WriteString(c, "POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n")
			trickle(c, strings.Repeat("{", 200), stop)
		}},
		{"idle after a request", func(c net.Conn, stop <-chan struct{}) {
			io.WriteString(c, "GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n")
			<-stop // keep-alive: the connection stays open with nothing to do
		}},
		{"nothing sent", func(c net.Conn, stop <-chan struct{}) { <-stop }},
	}
	st := newStack(t, testConfig, Options{HTTPLimits: short}, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", st.srv.HTTPAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() { defer close(done); tc.hold(c, stop) }()
			took, closed := closedWithin(t, c, 3*time.Second)
			close(stop)
			<-done
			if !closed {
				t.Fatalf("connection still open after %v (read %v, header %v, idle %v timeouts)", took, short.ReadTimeout, short.ReadHeaderTimeout, short.IdleTimeout)
			}
			if took > 1500*time.Millisecond {
				t.Fatalf("connection closed after %v, want about the configured timeout", took)
			}
		})
	}
}

// trickle writes s one byte every 20 ms until stop or a write fails.
func trickle(c net.Conn, s string, stop <-chan struct{}) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < len(s); i++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return
		}
	}
}

// Connections beyond MaxConnections are closed at once; the listener
// serves again as soon as one closes.
func TestHTTPConnectionLimit(t *testing.T) {
	st := newStack(t, testConfig, Options{HTTPLimits: HTTPLimits{MaxConnections: 2}}, nil)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", st.srv.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// The two held connections are accepted (a request on each proves it).
	for _, c := range held {
		if code := healthOn(t, c); code != http.StatusOK {
			t.Fatalf("healthcheck on a held connection: %d", code)
		}
	}
	extra, err := net.Dial("tcp", st.srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	io.WriteString(extra, "GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n")
	if took, closed := closedWithin(t, extra, 2*time.Second); !closed {
		t.Fatalf("third connection still open after %v with MaxConnections 2", took)
	}
	if n := st.srv.httpLn.(*limitListener).refused.Load(); n != 1 {
		t.Fatalf("refused connections: %d, want 1", n)
	}

	held[0].Close()
	// The slot comes back once the server has seen the close; retry until
	// it has, within a bound.
	deadline := time.Now().Add(2 * time.Second)
	for {
		c, err := net.Dial("tcp", st.srv.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		code := healthOnErr(c)
		c.Close()
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection served within 2s after one of the held ones closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func healthOn(t *testing.T, c net.Conn) int {
	t.Helper()
	code := healthOnErr(c)
	if code == 0 {
		t.Fatal("healthcheck: no response")
	}
	return code
}

// healthOnErr sends GET /healthcheck on c and returns the status, 0 when no
// response came.
func healthOnErr(c net.Conn) int {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /healthcheck HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Bound gives another HTTP listener (the metrics listener) the same
// limits: an idle connection is closed at the idle timeout, a connection
// beyond the bound at once.
func TestBound(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: httpText("metrics")}
	limits := short
	limits.MaxConnections = 1
	bounded := Bound(srv, ln, limits, quietLogger())
	go srv.Serve(bounded)
	defer srv.Close()

	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	if code := healthOn(t, idle); code != http.StatusOK {
		t.Fatalf("first connection: %d", code)
	}
	extra, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if _, closed := closedWithin(t, extra, 2*time.Second); !closed {
		t.Fatal("a connection beyond MaxConnections 1 stayed open")
	}
	if took, closed := closedWithin(t, idle, 3*time.Second); !closed || took > 1500*time.Millisecond {
		t.Fatalf("idle connection: closed %v after %v, want closed near the %v idle timeout", closed, took, short.IdleTimeout)
	}
}
