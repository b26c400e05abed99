package main

import (
	"testing"

	"github.com/sluice-rl/sluice/internal/admin"
)

// The heavy hitters and the page's rates are fed from every decision only
// while the admin listener that shows them is on.
func TestAdminWiringOnlyWhenListening(t *testing.T) {
	tests := []struct {
		name      string
		addr      string
		debugAddr string
		wantFed   bool
	}{
		{name: "default address", addr: admin.DefaultAddr, wantFed: true},
		{name: "off", addr: "off"},
		{name: "empty", addr: ""},
		{name: "deprecated debug address", addr: admin.DefaultAddr, debugAddr: "127.0.0.1:0", wantFed: true},
		{name: "deprecated debug address off", addr: admin.DefaultAddr, debugAddr: "off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &settings{Admin: adminSettings{Addr: tt.addr}, DebugAddr: tt.debugAddr}
			w := newAdminWiring(s)
			if fed := w.serviceObserver() != nil; fed != tt.wantFed {
				t.Errorf("service observer set: %v, want %v", fed, tt.wantFed)
			}
		})
	}
}
