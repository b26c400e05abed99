package service

import (
	"errors"
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/pkg/descriptor"
	"github.com/sluice-rl/sluice/pkg/limit"
)

// Target is what one descriptor of a domain resolves to under the config
// in use: the node it matches, the rules a request would decide and the
// identity their state is kept under. It is what operators' tools look
// up; computing it consumes nothing.
type Target struct {
	// Node is the matched config node; nil when none matched.
	Node *descriptor.Node
	// Unlimited is true when the node is `unlimited`.
	Unlimited bool
	// Rules are the rules a request with this descriptor alone decides
	// (after `replaces`); empty when nothing limits it.
	Rules []limit.Rule
	// Identity names the rules' state in the backend (with share_threshold
	// applied); empty when Rules is.
	Identity string
	// Config is the config the lookup used.
	Config *descriptor.Config
}

// ErrUnknownDomain is returned by Lookup for a domain the config does not
// have.
var ErrUnknownDomain = errors.New("domain not configured")

// Lookup resolves one descriptor as ShouldRateLimit would for a request
// holding only it, with the same bounds on its size. It reads the config
// in use once and touches no backend.
func (s *Service) Lookup(domain string, entries []descriptor.Entry) (Target, error) {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range entries {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
	if _, err := s.validate(req); err != nil {
		return Target{}, err
	}
	cfg := s.cfg.Load()
	dom := cfg.Domain(domain)
	if dom == nil {
		return Target{Config: cfg}, fmt.Errorf("%w: %q", ErrUnknownDomain, domain)
	}
	w := new(work)
	s.plan(req, dom, w)
	it := w.items[0]
	if it.kind == kindInvalid {
		return Target{Config: cfg}, status.Error(codes.InvalidArgument, it.invalid)
	}
	t := Target{Node: it.node, Unlimited: it.kind == kindUnlimited, Config: cfg}
	if it.kind == kindCheck {
		t.Rules = it.rules
		t.Identity = w.checks[it.check].Identity
	}
	return t, nil
}
