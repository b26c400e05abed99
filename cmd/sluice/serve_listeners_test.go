package main

import (
	"bufio"
	"encoding/json"
	"github.com/sluice-rl/sluice/internal/testkit/testenv"
	"strings"
	"testing"
)

// auxAddr finds the address a "<name> listener serving" JSON log line
// reports.
func auxAddr(log, name string) string {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var line struct {
			Message string `json:"@message"`
			Addr    string `json:"addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == name+" listener serving" {
			return line.Addr
		}
	}
	return ""
}

// The reference's metrics listener is where it was: USE_PROMETHEUS serves
// metrics at PROMETHEUS_ADDR under PROMETHEUS_PATH, and none of these
// variables is reported as ignored.
func TestServeReferenceListeners(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, dir, "api.yaml", yearly(1))
	s := startServe(t, []string{"SLUICE_CONFIG=" + dir, "SLUICE_ADMIN_ADDR=off",
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0", "PROMETHEUS_PATH=/stats"})
	s.check(t, "--domain", "api", "--descriptor", "k=v")
	log := s.stderr.String()
	for _, v := range []string{"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH"} {
		if strings.Contains(log, "ignoring") && strings.Contains(log, v) {
			t.Errorf("%s reported as ignored:\n%s", v, log)
		}
	}
	prom := auxAddr(log, "metrics (USE_PROMETHEUS)")
	if prom == "" {
		t.Fatalf("no metrics listener:\n%s", log)
	}
	if code, body := testenv.HTTPGet(t, "http://"+prom+"/stats"); code != 200 || !strings.Contains(body, "sluice_decisions_total") {
		t.Errorf("metrics at PROMETHEUS_ADDR/PROMETHEUS_PATH: %d\n%.300s", code, body)
	}
}

func TestReferenceListenerSettings(t *testing.T) {
	tests := []struct {
		name      string
		env       []string
		prom, pth string
		wantErr   string
	}{
		{name: "none"},
		{name: "prometheus defaults", env: []string{"USE_PROMETHEUS=true"}, prom: ":9090", pth: "/metrics"},
		{name: "prometheus off", env: []string{"USE_PROMETHEUS=false", "PROMETHEUS_ADDR=:1"}},
		{name: "prometheus without metrics", env: []string{"USE_PROMETHEUS=true", "SLUICE_METRICS=false"}, wantErr: "SLUICE_METRICS=false turns them off"},
		{name: "bad path", env: []string{"USE_PROMETHEUS=1", "PROMETHEUS_PATH=stats"}, wantErr: `invalid PROMETHEUS_PATH="stats"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := parseServeCase(t, nil, tt.env, tt.wantErr)
			if s == nil {
				return
			}
			if s.PrometheusAddr != tt.prom || s.PrometheusPath != tt.pth {
				t.Errorf("prometheus %q %q, want %q %q", s.PrometheusAddr, s.PrometheusPath, tt.prom, tt.pth)
			}
		})
	}
}
