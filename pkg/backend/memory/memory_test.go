package memory

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/pkg/backend"
	"github.com/sluice-rl/sluice/pkg/backend/backendtest"
)

func TestContract(t *testing.T) {
	backendtest.Run(t, func(t *testing.T, now func() time.Time) backend.Backend {
		return New(Options{Now: now, SweepInterval: -1})
	})
}
