package main

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// http2Call is what the server sent on one raw HTTP/2 connection while
// answering one ShouldRateLimit call.
type http2Call struct {
	initialWindow uint32 // SETTINGS_INITIAL_WINDOW_SIZE, 65535 when not sent
	connIncrement uint32 // the connection's WINDOW_UPDATEs before the answer, summed
	pings         int    // PINGs (not acks) before the answer ended
	answered      bool   // the call's trailers arrived
}

// rawCall sends one ShouldRateLimit call over a bare HTTP/2 connection, as
// Envoy would, and records the frames the server sends until the call's
// trailers: flow-control settings, window updates and pings.
func rawCall(t *testing.T, addr string) http2Call {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "sluice"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	if err := fr.WriteData(1, true, append(body, msg...)); err != nil {
		t.Fatal(err)
	}
	got := http2Call{initialWindow: 65535}
	for !got.answered {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's frames: %v (so far %+v)", err, got)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				got.initialWindow = v
			}
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				got.connIncrement += f.Increment
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				got.pings++
				if err := fr.WritePing(true, f.Data); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.HeadersFrame:
			got.answered = f.StreamID == 1 && f.StreamEnded()
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY: %v %s", f.ErrCode, f.DebugData())
		}
	}
	return got
}

// By default the gRPC listener's flow-control windows are fixed: a
// stream's is the largest request sluice accepts, the connection's at
// least 1 MiB, and the server sends no bandwidth-estimation PING with the
// WINDOW_UPDATE before it (gRPC's dynamic windows send one per round trip
// on every connection, which Envoy must answer).
func TestGRPCStaticWindows(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(10))
	for _, tc := range []struct {
		name          string
		env           []string
		window, conn  uint32 // the stream's window, and the connection's increment over 65535
		pings         int
		dynamicWindow bool
	}{
		{name: "default", window: 1 << 20, conn: 1<<20 - 65535},
		{name: "a larger request bound", env: []string{"SLUICE_MAX_REQUEST_BYTES=4194304"}, window: 4 << 20, conn: 4<<20 - 65535},
		{name: "a request bound below 64 KiB", env: []string{"SLUICE_MAX_REQUEST_BYTES=4096"}, window: 64 << 10, conn: 1<<20 - 65535},
		{name: "dynamic windows", env: []string{"SLUICE_GRPC_STATIC_WINDOWS=false"}, dynamicWindow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, append([]string{"SLUICE_CONFIG=" + dir, "SLUICE_ADMIN_ADDR=off"}, tc.env...))
			got := rawCall(t, s.grpc)
			if tc.dynamicWindow {
				// gRPC's own: default windows, and a PING on the first data.
				if got.initialWindow != 65535 || got.pings == 0 {
					t.Errorf("with dynamic windows: %+v, want the default window and a PING", got)
				}
				return
			}
			if got.initialWindow != tc.window || got.connIncrement != tc.conn || got.pings != 0 {
				t.Errorf("got %+v, want window %d, connection increment %d, no PING", got, tc.window, tc.conn)
			}
		})
	}
}
