package service

import (
	"context"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/pkg/descriptor"
)

// TestConcurrentRequestsAndReloads runs requests while the config is
// swapped, for the race detector, and checks the total admitted.
func TestConcurrentRequestsAndReloads(t *testing.T) {
	h := newHarness(t, Options{Headers: HeaderOptions{Enabled: true, IETF: true, RetryAfter: true}, DynamicMetadata: true}, anotherYAML)
	cfgs := [2]*descriptor.Config{parseConfig(t, anotherYAML), parseConfig(t, anotherYAML, basicYAML)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if g == 0 && i%5 == 0 {
					h.svc.SetConfig(cfgs[(i/5)%2])
				}
				resp, err := h.svc.ShouldRateLimit(context.Background(), rq("another", d("key2", "shared"), d("key3", "mine")))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.Statuses[0].Code == OK {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if admitted != 20 {
		t.Fatalf("%d requests admitted against 20/minute", admitted)
	}
}
