package admin

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/rlqs"
)

// TestQuotasAPI: GET /api/v1/rlqs lists the buckets Options.Quotas
// returns, an empty list as [], and answers 501 when the service is off.
func TestQuotasAPI(t *testing.T) {
	one := []rlqs.BucketView{{Stream: "s-1", Domain: "d", Bucket: "k=v", Descriptor: "k", Rate: 2,
		Rules: []rlqs.RuleView{{Rule: "r", Limit: 60, Share: 30, Members: 2, Demand: 120}}, Assignment: "token_bucket 30 per 60s, max 30"}}
	cases := []struct {
		name     string
		quotas   func() []rlqs.BucketView
		wantCode int
		wantBody string
	}{
		{"buckets", func() []rlqs.BucketView { return one }, 200, `"buckets":[{"stream":"s-1","domain":"d","bucket":"k=v","descriptor":"k","rate":2,"rules":[{"rule":"r","limit":60,"share":30,"members":2,"demand":120,"used":0}]`},
		{"none", func() []rlqs.BucketView { return nil }, 200, `{"buckets":[]}`},
		{"off", nil, 501, "SLUICE_RLQS=false"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{opts: Options{Quotas: tc.quotas}}
			w := httptest.NewRecorder()
			s.handleQuotas(w, httptest.NewRequest(http.MethodGet, "/api/v1/rlqs", nil))
			body := w.Body.String()
			if w.Code != tc.wantCode || !strings.Contains(strings.Join(strings.Fields(body), ""), tc.wantBody) {
				t.Fatalf("%d %s, want %d with %s", w.Code, body, tc.wantCode, tc.wantBody)
			}
			if w.Code == 200 && !json.Valid(w.Body.Bytes()) {
				t.Errorf("not JSON: %s", body)
			}
		})
	}
}
