package metrics

import (
	"errors"
	"slices"
	"testing"
)

// TestXDSFamilies follows a stream's life: connected, two ACKed versions
// (only the newest keeps its version series), a NACK that leaves the
// version alone, a disconnection.
func TestXDSFamilies(t *testing.T) {
	m, reg := newRegistered(t, Options{})
	x, err := m.RegisterXDS()
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name      string
		do        func()
		connected float64
		version   string // "" = no version series
		ack, nack float64
	}{
		{"connected", func() { x.Connected(true) }, 1, "", 0, 0},
		{"first ACK", func() { x.Accepted("1") }, 1, "1", 1, 0},
		{"second ACK", func() { x.Accepted("2") }, 1, "2", 2, 0},
		{"NACK", func() { x.Rejected("3", errors.New("bad unit")) }, 1, "2", 2, 1},
		{"same version again", func() { x.Accepted("2") }, 1, "2", 3, 1},
		{"disconnected", func() { x.Connected(false) }, 0, "2", 3, 1},
	}
	for _, st := range steps {
		st.do()
		f := scrape(t, reg)
		f.check(t, []want{
			{"sluice_xds_connected", "", st.connected},
			{"sluice_xds_responses_total", "result=ack", st.ack},
			{"sluice_xds_responses_total", "result=nack", st.nack},
		})
		var wantSeries []string
		if st.version != "" {
			wantSeries = []string{"version=" + st.version}
		}
		if got := f.series("sluice_xds_config_version_info"); !slices.Equal(got, wantSeries) {
			t.Errorf("%s: version series %q, want %q", st.name, got, wantSeries)
		}
		if t.Failed() {
			t.Fatalf("after step %q", st.name)
		}
	}
	if _, err := m.RegisterXDS(); err == nil {
		t.Error("registering the xDS families twice: want an error")
	}
	var nilX *XDS
	nilX.Connected(true)
	nilX.Accepted("1")
	nilX.Rejected("1", nil)
}
