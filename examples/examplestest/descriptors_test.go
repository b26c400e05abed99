package examplestest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// samples are the runtime values the enumeration puts in entries whose
// value comes from the request.
type samples struct {
	// remoteAddress holds client addresses for remote_address actions.
	remoteAddress []string
	// headers maps a request header name to values a request may carry.
	// ":path" needs no entry: its samples come from each route's match.
	headers map[string][]string
}

var defaultSamples = samples{
	remoteAddress: []string{"203.0.113.7", "2001:db8::7"},
	headers: map[string][]string{
		"x-user-id":  {"alice"},
		":authority": {"bookinfo.example.com", "other.example.com"},
	},
}

// producedDescriptor is one descriptor a route can send, with where it
// comes from.
type producedDescriptor struct {
	route   string
	entries []descriptor.Entry
}

func (d producedDescriptor) String() string {
	parts := make([]string, len(d.entries))
	for i, e := range d.entries {
		parts[i] = e.Key + "=" + e.Value
	}
	return d.route + " [" + strings.Join(parts, ", ") + "]"
}

// descriptorsOf enumerates, statically, the descriptors a list of rate
// limits can send: each action adds one entry, in order, with the fixed
// value of generic_key and header_value_match or a sample value for
// remote_address and request_headers, so a rate limit yields the cartesian
// product of its entries' values. pathSamples are the values of a ":path"
// header. An action kind the enumeration does not understand is an error,
// so a new kind of action cannot slip past the match check.
func descriptorsOf(route string, limits []*routev3.RateLimit, pathSamples []string, s samples) ([]producedDescriptor, error) {
	var out []producedDescriptor
	for i, rl := range limits {
		acc := [][]descriptor.Entry{nil}
		for j, a := range rl.GetActions() {
			key, values, err := actionEntry(a, pathSamples, s)
			if err != nil {
				return nil, fmt.Errorf("route %s rate_limits[%d].actions[%d]: %w", route, i, j, err)
			}
			var next [][]descriptor.Entry
			for _, prefix := range acc {
				for _, v := range values {
					next = append(next, append(slices.Clip(prefix), descriptor.Entry{Key: key, Value: v}))
				}
			}
			acc = next
		}
		for _, entries := range acc {
			out = append(out, producedDescriptor{route: route, entries: entries})
		}
	}
	return out, nil
}

// actionEntry returns the entry key one action adds and the values it can
// take, using Envoy's default keys where descriptor_key is optional.
func actionEntry(a *routev3.RateLimit_Action, pathSamples []string, s samples) (string, []string, error) {
	switch x := a.GetActionSpecifier().(type) {
	case *routev3.RateLimit_Action_RemoteAddress_:
		return "remote_address", s.remoteAddress, nil
	case *routev3.RateLimit_Action_RequestHeaders_:
		h := x.RequestHeaders
		if h.GetHeaderName() == ":path" {
			if len(pathSamples) == 0 {
				return "", nil, fmt.Errorf("no sample paths for :path")
			}
			return h.GetDescriptorKey(), pathSamples, nil
		}
		vs, ok := s.headers[strings.ToLower(h.GetHeaderName())]
		if !ok {
			return "", nil, fmt.Errorf("no sample value for header %q; add one to the test's samples", h.GetHeaderName())
		}
		return h.GetDescriptorKey(), vs, nil
	case *routev3.RateLimit_Action_GenericKey_:
		k := x.GenericKey.GetDescriptorKey()
		if k == "" {
			k = "generic_key"
		}
		return k, []string{x.GenericKey.GetDescriptorValue()}, nil
	case *routev3.RateLimit_Action_HeaderValueMatch_:
		k := x.HeaderValueMatch.GetDescriptorKey()
		if k == "" {
			k = "header_match"
		}
		return k, []string{x.HeaderValueMatch.GetDescriptorValue()}, nil
	default:
		return "", nil, fmt.Errorf("action %T is not enumerated by this test", x)
	}
}

// routePathSamples gives ":path" values a request routed by m can have:
// the prefix or path itself and a longer one with a query string.
func routePathSamples(m *routev3.RouteMatch) ([]string, error) {
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		sep := "/"
		if strings.HasSuffix(p.Prefix, "/") {
			sep = ""
		}
		return []string{p.Prefix, p.Prefix + sep + "sample?q=1"}, nil
	case *routev3.RouteMatch_Path:
		return []string{p.Path, p.Path + "?q=1"}, nil
	default:
		return nil, fmt.Errorf("route match %T has no sample paths", p)
	}
}

// envoyExampleDescriptors enumerates what examples/envoy/envoy.yaml sends.
func envoyExampleDescriptors(t *testing.T) []producedDescriptor {
	t.Helper()
	p := loadEnvoyParts(t)
	var out []producedDescriptor
	for _, r := range routesOf(p.hcm) {
		paths, err := routePathSamples(r.GetMatch())
		if err != nil {
			t.Fatalf("route %s: %v", r.GetName(), err)
		}
		ds, err := descriptorsOf(r.GetName(), r.GetRoute().GetRateLimits(), paths, defaultSamples)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ds...)
	}
	return out
}

// TestEnvoyDescriptorEnumeration pins what the routes of envoy.yaml send, so
// that a change to the routes shows up here and in the sluice config check.
func TestEnvoyDescriptorEnumeration(t *testing.T) {
	var got []string
	for _, d := range envoyExampleDescriptors(t) {
		got = append(got, d.String())
	}
	want := []string{
		"ocr [remote_address=203.0.113.7]",
		"ocr [remote_address=2001:db8::7]",
		"ocr [user=alice]",
		"ocr [user=alice, path=/api/ocr]",
		"ocr [user=alice, path=/api/ocr/sample?q=1]",
		"ocr [route=ocr]",
		"ocr [route=ocr, method=write]",
		"public [remote_address=203.0.113.7]",
		"public [remote_address=2001:db8::7]",
		"public [user=alice, path=/public/]",
		"public [user=alice, path=/public/sample?q=1]",
		"default [remote_address=203.0.113.7]",
		"default [remote_address=2001:db8::7]",
		"default [user=alice]",
		"default [user=alice, path=/]",
		"default [user=alice, path=/sample?q=1]",
		"default [route=default]",
	}
	wantList(t, "descriptors", got, want)
}

// wantList reports the difference when the list a check produced (what)
// is not the one the example must produce, item for item and in order.
func wantList(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s\n got %q\nwant %q", what, got, want)
	}
}
