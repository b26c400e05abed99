// Package h2test speaks raw HTTP/2 with a gRPC peer in tests, to see the
// frames gRPC's API hides: the peer's flow-control window setting, its
// connection window updates and its pings. Call is a client making one
// unary call; Serve is a server answering unary calls with one response.
// Everything is bounded by a deadline on the connection; nothing is
// retried.
package h2test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// deadline bounds every connection of this package.
const deadline = 20 * time.Second

// defaultWindow is HTTP/2's initial window, a peer's when it sends no
// SETTINGS_INITIAL_WINDOW_SIZE.
const defaultWindow = 65535

// Seen is what a peer sent on one connection, besides the calls.
type Seen struct {
	// InitialWindow is the peer's SETTINGS_INITIAL_WINDOW_SIZE (65535 when
	// it sent none).
	InitialWindow uint32
	// ConnIncrement sums the peer's WINDOW_UPDATEs of the connection.
	ConnIncrement uint32
	// Pings counts the peer's PINGs, not counting acks.
	Pings int
}

// conn is one HTTP/2 connection's framer and what its peer sent.
type conn struct {
	fr   *http2.Framer
	seen Seen
}

// control handles a frame that is not a call's: it records the peer's
// settings, window updates and pings, and acks settings and pings. It
// reports whether f was such a frame; io.EOF when it was the peer's
// GOAWAY without error (it is closing the connection).
func (c *conn) control(f http2.Frame) (bool, error) {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return true, nil
		}
		if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
			c.seen.InitialWindow = v
		}
		return true, c.fr.WriteSettingsAck()
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			c.seen.ConnIncrement += f.Increment
		}
		return true, nil
	case *http2.PingFrame:
		if f.IsAck() {
			return true, nil
		}
		c.seen.Pings++
		return true, c.fr.WritePing(true, f.Data)
	case *http2.GoAwayFrame:
		if f.ErrCode == http2.ErrCodeNo {
			return true, io.EOF // the peer is closing the connection
		}
		return true, fmt.Errorf("GOAWAY %v: %s", f.ErrCode, f.DebugData())
	}
	return false, nil
}

// headers encodes header fields, in order, as one HPACK block.
func headers(fields ...string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		// Writing to a bytes.Buffer cannot fail.
		_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return b.Bytes()
}

// message frames m as gRPC does (no compression, 4-byte length).
func message(m proto.Message) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b))), b...), nil
}

// Call makes one unary gRPC call of method (e.g. "/pkg.Service/Method")
// with req on a new connection to addr, as a client with HTTP/2's default
// settings and no pings of its own, and returns what the server sent until
// the call's trailers.
func Call(addr, method string, req proto.Message) (Seen, error) {
	nc, err := net.DialTimeout("tcp", addr, deadline)
	if err != nil {
		return Seen{}, err
	}
	defer nc.Close()
	if err := nc.SetDeadline(time.Now().Add(deadline)); err != nil {
		return Seen{}, err
	}
	c := &conn{fr: http2.NewFramer(nc, nc), seen: Seen{InitialWindow: defaultWindow}}
	body, err := message(req)
	if err != nil {
		return Seen{}, err
	}
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		return Seen{}, err
	}
	if err := c.fr.WriteSettings(); err != nil {
		return Seen{}, err
	}
	block := headers(":method", "POST", ":scheme", "http", ":authority", "h2test", ":path", method,
		"content-type", "application/grpc", "te", "trailers")
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true}); err != nil {
		return Seen{}, err
	}
	if err := c.fr.WriteData(1, true, body); err != nil {
		return Seen{}, err
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return c.seen, fmt.Errorf("reading the server's frames: %w", err)
		}
		if ok, err := c.control(f); ok {
			if err != nil {
				return c.seen, err
			}
			continue
		}
		if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == 1 && h.StreamEnded() {
			return c.seen, nil
		}
	}
}

// Server answers unary gRPC calls, whatever their method, with one
// response, on the connections it accepts one after the other.
type Server struct {
	ln   net.Listener
	body []byte
	done chan struct{}

	mu    sync.Mutex
	conns []Seen
	calls int
	err   error
}

// Serve starts a Server on a free loopback port that answers every call
// with resp and an OK status.
func Serve(resp proto.Message) (*Server, error) {
	body, err := message(resp)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, body: body, done: make(chan struct{})}
	go s.accept()
	return s, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server once the connection it is serving ends, and
// returns what its clients sent on each connection, how many calls it
// answered, and the first error a connection met other than its client
// closing it.
func (s *Server) Close() (conns []Seen, calls int, err error) {
	s.ln.Close()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns, s.calls, s.err
}

func (s *Server) accept() {
	defer close(s.done)
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		seen, calls, err := s.serve(nc)
		s.mu.Lock()
		s.conns = append(s.conns, seen)
		s.calls += calls
		if s.err == nil && err != nil {
			s.err = err
		}
		s.mu.Unlock()
	}
}

// serve answers the calls of one connection until its client closes it.
func (s *Server) serve(nc net.Conn) (Seen, int, error) {
	defer nc.Close()
	if err := nc.SetDeadline(time.Now().Add(deadline)); err != nil {
		return Seen{}, 0, err
	}
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(nc, preface); err != nil || string(preface) != http2.ClientPreface {
		return Seen{}, 0, fmt.Errorf("client preface %q: %v", preface, err)
	}
	c := &conn{fr: http2.NewFramer(nc, nc), seen: Seen{InitialWindow: defaultWindow}}
	if err := c.fr.WriteSettings(); err != nil {
		return c.seen, 0, err
	}
	calls := 0
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return c.seen, calls, err
		}
		if ok, err := c.control(f); ok {
			if err == io.EOF {
				return c.seen, calls, nil
			}
			if err != nil {
				return c.seen, calls, err
			}
			continue
		}
		// A call's request ends with its END_STREAM (on DATA, or on
		// HEADERS for an empty one); answer it then.
		var id uint32
		switch f := f.(type) {
		case *http2.DataFrame:
			if f.StreamEnded() {
				id = f.StreamID
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				id = f.StreamID
			}
		}
		if id == 0 {
			continue
		}
		if err := s.answer(c.fr, id); err != nil {
			return c.seen, calls, err
		}
		calls++
	}
}

// answer writes one call's response: headers, the message, OK trailers.
func (s *Server) answer(fr *http2.Framer, id uint32) error {
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true,
		BlockFragment: headers(":status", "200", "content-type", "application/grpc")}); err != nil {
		return err
	}
	if err := fr.WriteData(id, false, s.body); err != nil {
		return err
	}
	return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: true,
		BlockFragment: headers("grpc-status", strconv.Itoa(0))})
}
