package server

import (
	"errors"
	"io"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// handleHealthcheck answers 200 "OK" while healthy and 500 with an empty
// body otherwise, as envoyproxy/ratelimit does.
func (s *Server) handleHealthcheck(w http.ResponseWriter, _ *http.Request) {
	if !s.Healthy() {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "OK")
}

// handleJSON decides one proto3-JSON RateLimitRequest (any method) and
// answers the RateLimitResponse as proto3 JSON: 200, or 429 when the
// overall code is OVER_LIMIT. A body that is not a request is 400 (413 if
// too large); the service's InvalidArgument is 400, Unavailable 503 and
// any other error 500, each with the reason as a plain-text body. A caller
// the access policy refuses (/json off, no client certificate, a refund or
// override from an untrusted caller) gets 403 with the reason. Beyond
// GRPCLimits.MaxInFlight calls open, a request is answered 503 at once.
func (s *Server) handleJSON(w http.ResponseWriter, r *http.Request) {
	if why := s.access.jsonRefusal(r); why != "" {
		http.Error(w, why, http.StatusForbidden)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.opts.MaxRequestBytes)))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.tooLarge.note("/json", err)
			http.Error(w, tooLargeMessage(tooBig.Limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "body is not a proto3 JSON RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.access.checkPrivileged(&req, r.TLS); err != nil {
		http.Error(w, status.Convert(err).Message(), http.StatusForbidden)
		return
	}
	if !s.inflight.acquire(0) {
		http.Error(w, status.Convert(errOverloaded).Message(), http.StatusServiceUnavailable)
		return
	}
	resp, err := s.opts.Service.ShouldRateLimit(r.Context(), &req)
	s.inflight.release()
	if err != nil {
		st := status.Convert(err)
		http.Error(w, st.Message(), httpStatus(st.Code()))
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		s.log.WithError(err).Error("/json: encode response")
		http.Error(w, "encode response", http.StatusInternalServerError)
		return
	}
	code := http.StatusOK
	switch resp.GetOverallCode() {
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		code = http.StatusTooManyRequests
	case rlsv3.RateLimitResponse_UNKNOWN:
		code = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(out)
}

// httpStatus maps a service error's gRPC code to the /json status.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Canceled:
		return 499 // client closed the request; nobody reads it
	}
	return http.StatusInternalServerError
}
