package metrics

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/service"
)

// The request values in a detailed_metric descriptor's label are shown as
// they are by default (the incumbent's behaviour, an API key readable by
// anyone who reads /metrics), or hashed, or truncated; configured values
// and value_to_metric levels alike.
func TestDetailedValues(t *testing.T) {
	const yaml = "domain: api\ndescriptors:\n  - key: plan\n    value: gold\n    descriptors:\n" +
		"      - key: api_key\n        detailed_metric: true\n        rate_limit: {unit: hour, requests_per_unit: 100}\n"
	const key = "sk_live_5f2b9c0e7d"
	sum := sha256.Sum256([]byte(key))
	gold := sha256.Sum256([]byte("gold"))
	for _, tc := range []struct {
		values DetailedValues
		label  string
	}{
		{DetailedRaw, "plan_gold.api_key_" + key},
		{DetailedHash, "plan_h:" + hex.EncodeToString(gold[:8]) + ".api_key_h:" + hex.EncodeToString(sum[:8])},
		{DetailedTruncate, "plan_gold.api_key_sk_l…"},
	} {
		t.Run(fmt.Sprint("mode ", int(tc.values)), func(t *testing.T) {
			h := newHarness(t, Options{DetailedValues: tc.values}, service.Options{}, yaml)
			if _, err := h.call(t, rq("api", d("plan", "gold", "api_key", key))); err != nil {
				t.Fatal(err)
			}
			f := scrape(t, h.reg)
			f.check(t, []want{{"sluice_descriptor_hits_total", "descriptor=" + tc.label + ",domain=api", 1}})
			if tc.values != DetailedRaw && strings.Contains(fmt.Sprint(f), key) {
				t.Errorf("the raw value is still on /metrics")
			}
		})
	}
	for _, s := range []string{"raw", "hash", "truncate"} {
		if _, err := ParseDetailedValues(s); err != nil {
			t.Errorf("ParseDetailedValues(%q): %v", s, err)
		}
	}
	if _, err := ParseDetailedValues("base64"); err == nil || !strings.Contains(err.Error(), "want raw, hash or truncate") {
		t.Errorf("ParseDetailedValues(base64): %v", err)
	}
}
