package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-rl/sluice/internal/testkit/envoyquota"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
)

// TestServeRLQS: sluice serve answers StreamRateLimitQuotas on its gRPC
// listener, beside ShouldRateLimit, on the same config; with --rlqs=false
// it does not, and the metrics count the streams.
func TestServeRLQS(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(2))
	cases := []struct {
		name   string
		args   []string
		served bool
	}{
		{"on by default", nil, true},
		{"off", []string{"--rlqs=false"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startServe(t, []string{"SLUICE_CONFIG=" + dir}, tc.args...)
			conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			e := envoyquota.New(envoyquota.Config{Domain: "api", ReportingInterval: time.Second, Wait: 10 * time.Second}, conn, time.Now)
			defer e.Close()
			if !e.Request(map[string]string{"k": "v"}) {
				t.Fatal("the first request of a bucket was denied (no_assignment_behavior is allow)")
			}
			a := e.Assignment(map[string]string{"k": "v"})
			if !tc.served {
				if a != nil || e.Lost != 1 {
					t.Fatalf("with --rlqs=false: assignment %v, lost reports %d; want none, 1", a, e.Lost)
				}
				return
			}
			tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
			// 2 per (365-day) year: the whole limit, less the request the
			// first report counted.
			if tb.GetTokensPerFill().GetValue() != 2 || tb.GetMaxTokens() != 1 || tb.GetFillInterval().GetSeconds() != 365*86400 {
				t.Fatalf("assignment %v, want a token bucket of 2 per year holding 1", a)
			}
			if _, body := s.get(t, "/metrics"); !strings.Contains(body, "sluice_rlqs_streams 1") {
				t.Errorf("/metrics lacks sluice_rlqs_streams 1:\n%s", grepLines(body, "sluice_rlqs_"))
			}
			// The bucket and its share on the admin listener: the API,
			// sluice counters rlqs, the page.
			env := []string{"SLUICE_ADMIN_ADDR=" + s.admin(t)}
			code, out, errOut := runCmd(t, env, "counters", "rlqs")
			if code != 0 {
				t.Fatalf("counters rlqs: exit %d: %s", code, errOut)
			}
			for _, want := range []string{"DOMAIN", "api  ", "k=v", "fixed_window 2/1 year 2/2 (1 Envoys, 1 used)", "token_bucket 2 per 31536000s, max 1"} {
				if !strings.Contains(out, want) {
					t.Errorf("counters rlqs output lacks %q:\n%s", want, out)
				}
			}
			if code, out, _ := runCmd(t, env, "counters", "rlqs", "--domain", "other"); code != 0 || !strings.Contains(out, "no Envoy reports a bucket") {
				t.Errorf("counters rlqs --domain other: exit %d:\n%s", code, out)
			}
			if _, page := testenv.HTTPGet(t, "http://"+s.admin(t)+"/"); !strings.Contains(page, `<section id="rlqs">`) || !strings.Contains(page, "k=v") {
				t.Errorf("the admin page has no Rate Limit Quota Service section with the bucket")
			}
		})
	}
}

// grepLines returns the lines of s holding sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// rawCodec sends and receives messages as they are on the wire, so a test
// can send what Envoy's C++ protobuf sends and grpc-go would refuse to
// encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// TestServeRLQSNonUTF8Bucket: a bucket value that is not UTF-8 (a header
// byte Envoy copies as it is) is a bucket like any other: the stream gets
// its assignment, the value echoed byte for byte, instead of failing.
func TestServeRLQSNonUTF8Bucket(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(2))
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir})
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	desc := &grpc.StreamDesc{StreamName: "StreamRateLimitQuotas", ServerStreams: true, ClientStreams: true}
	cs, err := conn.NewStream(ctx, desc, rlqspb.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "k")
	entry = protowire.AppendString(protowire.AppendTag(entry, 2, protowire.BytesType), "\xff")
	id := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), entry)
	usage := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), id)
	msg := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "api")
	msg = protowire.AppendBytes(protowire.AppendTag(msg, 2, protowire.BytesType), usage)
	if err := cs.SendMsg(msg); err != nil {
		t.Fatal(err)
	}
	var out []byte
	if err := cs.RecvMsg(&out); err != nil {
		t.Fatalf("the stream failed: %v", err)
	}
	if !bytes.Contains(out, []byte("k\x12\x01\xff")) || !bytes.Contains(out, []byte{0x1a}) {
		t.Errorf("response %x does not echo the bucket with a token bucket", out)
	}
}
