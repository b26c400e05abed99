package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// JSONMode says whether the HTTP listener serves /json.
type JSONMode uint8

const (
	// JSONAuto serves /json unless gRPC requires client certificates and
	// the HTTP listener cannot check them (it is not TLS): then /json
	// answers 403, so that it is no way around the certificates.
	JSONAuto JSONMode = iota
	// JSONOn always serves /json, even over plain HTTP while gRPC requires
	// client certificates (a warning is logged at start).
	JSONOn
	// JSONOff never serves /json: it answers 403.
	JSONOff
)

// PrivilegedMode says who may send privileged requests: a refund (a
// descriptor with is_negative_hits) or a limit override (a descriptor with
// `limit`). Either lets a caller change another caller's limit: restore a
// descriptor's quota, or consume it under a rule of its own making.
type PrivilegedMode uint8

const (
	// PrivilegedAny accepts privileged requests from every caller, as
	// envoyproxy/ratelimit does.
	PrivilegedAny PrivilegedMode = iota
	// PrivilegedTrusted accepts them only from trusted callers: those whose
	// connection presented a client certificate verified by the client CA
	// (TLSFiles.ClientCAFile) and carrying one of Access.TrustedSANs.
	PrivilegedTrusted
	// PrivilegedNone refuses them from every caller.
	PrivilegedNone
)

// Access says who may reach a decision over the HTTP listener and who may
// send privileged requests. The zero Access is envoyproxy/ratelimit's
// behaviour, except that /json is off while gRPC requires client
// certificates the HTTP listener cannot check (JSONAuto).
type Access struct {
	// HTTPTLS serves the HTTP listener over TLS with the gRPC listener's
	// files (Options.TLS, re-read when they change). With a client CA, a
	// client certificate is verified when presented and /json requires one
	// (with TLSFiles.ClientSAN when set), as gRPC does; /healthcheck and the
	// other paths do not, so that probes and scrapers need none.
	HTTPTLS bool
	// JSON selects whether /json is served.
	JSON JSONMode
	// Privileged selects who may send refunds and limit overrides; a
	// refused request gets PermissionDenied (403 on /json) naming the
	// descriptor.
	Privileged PrivilegedMode
	// TrustedSANs are the subject alternative names (DNS name, IP address,
	// URI or e-mail address) of trusted callers' client certificates;
	// required by PrivilegedTrusted.
	TrustedSANs []string
}

// accessPolicy is Access resolved against the TLS options.
type accessPolicy struct {
	Access
	clientCA  bool   // gRPC requires client certificates
	clientSAN string // ... carrying this SAN, when set
	jsonOff   string // why /json is off; "" when served
}

// resolve checks a against tls and decides what /json does. warn receives
// what an operator must hear at start.
func (a Access) resolve(files *TLSFiles, warn func(string)) (accessPolicy, error) {
	p := accessPolicy{Access: a}
	if files != nil && files.ClientCAFile != "" {
		p.clientCA, p.clientSAN = true, files.ClientSAN
	}
	if a.HTTPTLS && files == nil {
		return p, errors.New("server: TLS on the HTTP listener needs the gRPC TLS files")
	}
	switch a.Privileged {
	case PrivilegedAny, PrivilegedNone:
	case PrivilegedTrusted:
		if !p.clientCA {
			return p, errors.New("server: privileged requests from trusted callers only needs a client CA: trust is a verified client certificate")
		}
		if len(a.TrustedSANs) == 0 {
			return p, errors.New("server: privileged requests from trusted callers only needs at least one trusted SAN")
		}
	default:
		return p, fmt.Errorf("server: unknown privileged mode %d", a.Privileged)
	}
	bypass := p.clientCA && !a.HTTPTLS // /json would skip the client certificates
	switch a.JSON {
	case JSONAuto:
		if bypass {
			p.jsonOff = "/json is off: gRPC requires client certificates and this HTTP listener is plain HTTP, so /json would let any caller around them; serve HTTP over TLS to check them here too, or turn /json on explicitly"
			warn(p.jsonOff)
		}
	case JSONOn:
		if bypass {
			warn("/json is on over plain HTTP although gRPC requires client certificates: any caller that reaches the HTTP port gets decisions, refunds and overrides without one")
		}
	case JSONOff:
		p.jsonOff = "/json is turned off on this server"
	default:
		return p, fmt.Errorf("server: unknown /json mode %d", a.JSON)
	}
	return p, nil
}

// jsonRefusal says why the caller of r may not use /json, or "".
func (p *accessPolicy) jsonRefusal(r *http.Request) string {
	if p.jsonOff != "" {
		return p.jsonOff
	}
	if !p.HTTPTLS || !p.clientCA {
		return ""
	}
	leaf := verifiedLeaf(r.TLS)
	if leaf == nil {
		return "/json requires a client certificate signed by the client CA, as gRPC does"
	}
	if p.clientSAN != "" && !hasSAN(leaf, p.clientSAN) {
		return fmt.Sprintf("/json requires a client certificate carrying the SAN %q, as gRPC does", p.clientSAN)
	}
	return ""
}

// checkPrivileged returns PermissionDenied if req is privileged and the
// caller, whose connection state is cs (nil: not TLS), may not send it.
func (p *accessPolicy) checkPrivileged(req *rlsv3.RateLimitRequest, cs *tls.ConnectionState) error {
	if p.Privileged == PrivilegedAny || req == nil {
		return nil
	}
	i, what := privileged(req)
	if i < 0 {
		return nil
	}
	if p.Privileged == PrivilegedNone {
		return status.Errorf(codes.PermissionDenied, "descriptor %d is %s: this server accepts no refunds or limit overrides", i, what)
	}
	if leaf := verifiedLeaf(cs); leaf != nil {
		for _, san := range p.TrustedSANs {
			if hasSAN(leaf, san) {
				return nil
			}
		}
	}
	return status.Errorf(codes.PermissionDenied, "descriptor %d is %s: accepted only from a caller whose client certificate carries a trusted SAN", i, what)
}

// privileged returns the index of the first privileged descriptor of req
// and what makes it so, or -1.
func privileged(req *rlsv3.RateLimitRequest) (int, string) {
	for i, d := range req.Descriptors {
		switch {
		case d.GetIsNegativeHits():
			return i, "a refund (is_negative_hits)"
		case d.GetLimit() != nil:
			return i, "a limit override"
		}
	}
	return -1, ""
}

// verifiedLeaf returns the client certificate of cs if it was verified
// against the client CA, or nil.
func verifiedLeaf(cs *tls.ConnectionState) *x509.Certificate {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}

// shouldRateLimitMethod is the full gRPC method name of ShouldRateLimit.
const shouldRateLimitMethod = "/" + RateLimitServiceName + "/ShouldRateLimit"

// privilegedUnary refuses privileged ShouldRateLimit calls the policy does
// not accept from the caller.
func (s *Server) privilegedUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if info.FullMethod == shouldRateLimitMethod {
		if r, ok := req.(*rlsv3.RateLimitRequest); ok {
			var cs *tls.ConnectionState
			if pr, ok := peer.FromContext(ctx); ok {
				if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok {
					cs = &ti.State
				}
			}
			if err := s.access.checkPrivileged(r, cs); err != nil {
				return nil, err
			}
		}
	}
	return next(ctx, req)
}
