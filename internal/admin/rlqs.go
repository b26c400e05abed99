package admin

import (
	"net/http"

	"github.com/sluice-rl/sluice/internal/rlqs"
)

// QuotaBuckets is the answer of GET /api/v1/rlqs: the Rate Limit Quota
// Service's buckets on this instance's open streams, with their shares.
type QuotaBuckets struct {
	Buckets []rlqs.BucketView `json:"buckets"`
}

// handleQuotas serves GET /api/v1/rlqs; 501 when the Rate Limit Quota
// Service is off.
func (s *Server) handleQuotas(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Quotas == nil {
		httpError(w, http.StatusNotImplemented, "the Rate Limit Quota Service is off (SLUICE_RLQS=false)")
		return
	}
	out := QuotaBuckets{Buckets: s.opts.Quotas()}
	if out.Buckets == nil {
		out.Buckets = []rlqs.BucketView{}
	}
	writeJSON(w, http.StatusOK, out)
}

// quotaRows are the page's rows of the Rate Limit Quota Service: at most
// maxQuotaRows buckets.
func (s *Server) quotaRows() (rows []rlqs.BucketView, more int) {
	if s.opts.Quotas == nil {
		return nil, 0
	}
	all := s.opts.Quotas()
	if len(all) > maxQuotaRows {
		return all[:maxQuotaRows], len(all) - maxQuotaRows
	}
	return all, 0
}

// maxQuotaRows bounds the buckets the page lists.
const maxQuotaRows = 50
