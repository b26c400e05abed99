package memory

import (
	"testing"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/backendtest"
)

func TestQuotaContract(t *testing.T) {
	backendtest.RunQuota(t, func(t *testing.T) (backend.QuotaStore, func(bucket, rule string) string) {
		s := NewQuotaStore()
		return s, s.QuotaKey
	})
}
