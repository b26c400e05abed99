package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestDebugListenerServesPprof(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	d, err := startDebug("127.0.0.1:0", log)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	resp, err := http.Get("http://" + d.Addr() + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Fatalf("GET goroutine profile: %d %.200q", resp.StatusCode, body)
	}
}

func TestDebugListenerOffByDefault(t *testing.T) {
	s, err := parseServe(nil, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.DebugAddr != "" {
		t.Fatalf("debug listener on by default at %q", s.DebugAddr)
	}
}
