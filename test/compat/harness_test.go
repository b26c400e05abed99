package compat

import (
	"context"
	"fmt"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testkit/sluicetest"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// server is one running sluice binary and what it was started with.
type server struct {
	*sluicetest.Process
	v   variant
	dir string // the config directory (RUNTIME_ROOT layout: dir/ratelimit/config)
}

// start copies the testdata files named (paths under testdata, copied to the
// config directory under their base names, or "path=name" to rename) into a new runtime tree and runs
// sluice on it under variant v with extra settings env. The config is read
// through the incumbent's layout: RUNTIME_ROOT, RUNTIME_SUBDIRECTORY
// "ratelimit", RUNTIME_APPDIRECTORY "config".
func start(t *testing.T, v variant, env map[string]string, files ...string) *server {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, name, renamed := strings.Cut(f, "=")
		if !renamed {
			name = filepath.Base(src)
		}
		copyFile(t, filepath.Join("testdata", src), filepath.Join(dir, name))
	}
	all := map[string]string{
		"RUNTIME_ROOT":           root,
		"RUNTIME_SUBDIRECTORY":   "ratelimit",
		"RUNTIME_APPDIRECTORY":   "config",
		"SLUICE_RELOAD_INTERVAL": "100ms",
	}
	for k, val := range v.env(t) {
		all[k] = val
	}
	for k, val := range env {
		all[k] = val
	}
	p := sluicetest.Start(t, sluicetest.Options{Env: all})
	return &server{Process: p, v: v, dir: dir}
}

// copyFile copies src to dst through a temporary name, so a polling reload
// never reads half a file.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	testenv.ReplaceFile(t, dst, string(b))
}

// desc is a request descriptor under construction.
type desc struct{ d *corev3.RateLimitDescriptor }

// d builds a descriptor from alternating keys and values.
func d(kv ...string) desc {
	out := &corev3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &corev3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return desc{out}
}

// hits sets the descriptor's own hits_addend (0 is a check that charges
// nothing, as Envoy sends on a request path that debits on stream done).
func (x desc) hits(n uint64) desc { x.d.HitsAddend = wrapperspb.UInt64(n); return x }

// rq builds a request for domain.
func rq(domain string, ds ...desc) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, x := range ds {
		req.Descriptors = append(req.Descriptors, x.d)
	}
	return req
}

// ask sends req and fails t on any gRPC error.
func (s *server) ask(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.try(req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// try sends req and returns the answer or the error.
func (s *server) try(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Client().ShouldRateLimit(ctx, req)
}

// st is what the incumbent's tests compare of a DescriptorStatus, but the
// duration, which they read back from the answer (checked apart by
// checkDuration).
type st struct {
	code      rlsv3.RateLimitResponse_Code
	limit     uint32
	unit      string
	name      string
	remaining uint32
}

func (s st) String() string {
	if s.unit == "" {
		return fmt.Sprintf("{%v no limit, remaining %d}", s.code, s.remaining)
	}
	name := ""
	if s.name != "" {
		name = " " + s.name
	}
	return fmt.Sprintf("{%v %d/%s%s, remaining %d}", s.code, s.limit, s.unit, name, s.remaining)
}

// stOf reduces a DescriptorStatus to st.
func stOf(s *rlsv3.RateLimitResponse_DescriptorStatus) st {
	out := st{code: s.GetCode(), remaining: s.GetLimitRemaining()}
	if l := s.GetCurrentLimit(); l != nil {
		out.limit, out.unit, out.name = l.RequestsPerUnit, l.Unit.String(), l.Name
	}
	return out
}

// answer is a whole response as the incumbent's tests compare it.
type answer struct {
	code     rlsv3.RateLimitResponse_Code
	statuses string
}

func (a answer) String() string { return fmt.Sprintf("%v %s", a.code, a.statuses) }

// answerOf reduces a response to answer.
func answerOf(r *rlsv3.RateLimitResponse) answer {
	parts := make([]string, len(r.GetStatuses()))
	for i, s := range r.GetStatuses() {
		parts[i] = stOf(s).String()
	}
	return answer{r.GetOverallCode(), "[" + strings.Join(parts, " ") + "]"}
}

// ans builds the answer the incumbent gives: an overall code and statuses.
func ans(code rlsv3.RateLimitResponse_Code, statuses ...st) answer {
	parts := make([]string, len(statuses))
	for i, s := range statuses {
		parts[i] = s.String()
	}
	return answer{code, "[" + strings.Join(parts, " ") + "]"}
}

// limited is the status of a descriptor with a limit.
func limited(code rlsv3.RateLimitResponse_Code, limit uint32, unit string, remaining uint32) st {
	return st{code: code, limit: limit, unit: unit, remaining: remaining}
}

// named is limited with the rule's name.
func named(code rlsv3.RateLimitResponse_Code, limit uint32, unit, name string, remaining uint32) st {
	return st{code: code, limit: limit, unit: unit, name: name, remaining: remaining}
}

// noLimit is the status of a descriptor no config node limits.
var noLimit = st{code: ok}

// errText is an error as the incumbent's tests compare it: the gRPC code
// and the message.
func errText(err error) string {
	if err == nil {
		return "no error"
	}
	s, _ := status.FromError(err)
	return s.Code().String() + ": " + s.Message()
}

// checkDuration checks duration_until_reset of every limited status: more
// than 0 and at most the rule's unit, as the incumbent's are (its tests
// read the value back).
func checkDuration(t *testing.T, what string, r *rlsv3.RateLimitResponse) {
	t.Helper()
	units := map[string]time.Duration{"SECOND": time.Second, "MINUTE": time.Minute, "HOUR": time.Hour, "DAY": 24 * time.Hour}
	for i, s := range r.GetStatuses() {
		l := s.GetCurrentLimit()
		if l == nil {
			continue
		}
		max, known := units[l.Unit.String()]
		got := s.GetDurationUntilReset().AsDuration()
		if !known || got <= 0 || got > max {
			t.Errorf("%s: status %d: duration_until_reset %v, want within (0, %v]", what, i, got, max)
		}
	}
}
