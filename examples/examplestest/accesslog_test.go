package examplestest

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	streamv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	"google.golang.org/protobuf/types/known/structpb"

	sluicesvc "github.com/sluice-rl/sluice/internal/service"
	"github.com/sluice-rl/sluice/internal/testkit/stacktest"
	"github.com/sluice-rl/sluice/pkg/backend/memory"
	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// commandOperator is one of Envoy's access-log command operators:
// %NAME%, %NAME(ARGS)% or %NAME(ARGS):LENGTH%.
var commandOperator = regexp.MustCompile(`%([A-Z_0-9]+)(?:\(([^)]*)\))?(?::\d+)?%`)

// knownOperators are the command operators envoy.yaml's access log may use
// (Envoy's substitution format operators that it does use, by name).
var knownOperators = []string{
	"START_TIME", "REQ", "RESPONSE_CODE", "RESPONSE_FLAGS", "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT",
	"DURATION", "DYNAMIC_METADATA",
}

// accessLogFormat returns the JSON format of envoy.yaml's access log,
// field name to format string.
func accessLogFormat(t *testing.T) map[string]string {
	t.Helper()
	p := loadEnvoyParts(t)
	logs := p.hcm.GetAccessLog()
	if len(logs) != 1 {
		t.Fatalf("%d access logs, want 1", len(logs))
	}
	out := &streamv3.StdoutAccessLog{}
	if err := logs[0].GetTypedConfig().UnmarshalTo(out); err != nil {
		t.Fatalf("access log: %v", err)
	}
	format := map[string]string{}
	for k, v := range out.GetLogFormat().GetJsonFormat().GetFields() {
		s, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			t.Fatalf("access log field %s is not a format string", k)
		}
		format[k] = s.StringValue
	}
	return format
}

// TestEnvoyAccessLogNamesDenials checks envoy.yaml's access log: a JSON
// format (validated as Envoy's StdoutAccessLog by TestEnvoyBootstrapValidates)
// whose every command operator is one Envoy has, whose dynamic metadata is
// read from the rate-limit filter's namespace, and whose keys are keys
// sluice really sends: a service built with the example's own limits and
// RESPONSE_DYNAMIC_METADATA answers a denied request with each of them.
func TestEnvoyAccessLogNamesDenials(t *testing.T) {
	format := accessLogFormat(t)
	var keys []string
	for field, f := range format {
		ops := commandOperator.FindAllStringSubmatch(f, -1)
		if len(ops) != 1 || ops[0][0] != f {
			t.Errorf("access log field %s = %q: want exactly one command operator", field, f)
			continue
		}
		name, args := ops[0][1], ops[0][2]
		if !slices.Contains(knownOperators, name) {
			t.Errorf("access log field %s uses %s, not an operator this test knows", field, name)
		}
		if name == "DYNAMIC_METADATA" {
			ns, key, ok := strings.Cut(args, ":")
			if !ok || ns != "envoy.filters.http.ratelimit" {
				t.Errorf("access log field %s reads %q, want the rate-limit filter's namespace envoy.filters.http.ratelimit:KEY", field, args)
			}
			keys = append(keys, key)
		}
	}
	for _, want := range []string{"overLimit", "shadowOverLimit"} {
		if !slices.Contains(keys, want) {
			t.Errorf("the access log does not print %s", want)
		}
	}

	// The example's own limits: user alice's fourth OCR call in five
	// minutes is denied by ocr_5min. A node in shadow mode, added beside
	// them, shows shadowOverLimit.
	cfg, err := descriptor.Load(descriptor.LoadOptions{}, repoPath(t, "examples/envoy/sluice"))
	if err != nil {
		t.Fatal(err)
	}
	svc := sluicesvc.New(sluicesvc.Options{
		Backend:         stacktest.Memory(t, memory.Options{}),
		DynamicMetadata: true,
		Logger:          stacktest.QuietLogger(),
	})
	svc.SetConfig(cfg)
	var md *structpb.Struct
	for range 4 {
		resp, err := svc.ShouldRateLimit(context.Background(), stacktest.Request("api", stacktest.Descriptor("user", "alice", "path", "/api/ocr")))
		if err != nil {
			t.Fatal(err)
		}
		md = resp.GetDynamicMetadata()
	}
	over := md.GetFields()["overLimit"].GetListValue().GetValues()
	if len(over) != 1 {
		t.Fatalf("overLimit %v, want the one denied descriptor", md.GetFields()["overLimit"])
	}
	denied := over[0].GetStructValue().GetFields()
	if d := denied["descriptor"].GetStringValue(); d != "user.path_/api/ocr*" {
		t.Errorf("overLimit descriptor %q, want user.path_/api/ocr*", d)
	}
	if r := denied["rules"].GetListValue().GetValues(); len(r) != 1 || r[0].GetStringValue() != "ocr_5min" {
		t.Errorf("overLimit rules %v, want [ocr_5min]", denied["rules"])
	}
	svc.SetConfig(stacktest.ParseConfig(t, "domain: api\ndescriptors:\n  - key: trial\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 0}\n"))
	resp, err := svc.ShouldRateLimit(context.Background(), stacktest.Request("api", stacktest.Descriptor("trial", "x")))
	if err != nil {
		t.Fatal(err)
	}
	for _, fields := range []map[string]*structpb.Value{md.GetFields(), resp.GetDynamicMetadata().GetFields()} {
		for k := range fields {
			keys = slices.DeleteFunc(keys, func(s string) bool { return s == k })
		}
	}
	if len(keys) != 0 {
		t.Errorf("the access log reads %v, which sluice's responses do not carry", keys)
	}
}
