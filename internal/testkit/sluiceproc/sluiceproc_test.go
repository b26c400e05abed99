package sluiceproc

import "testing"

func TestListenRE(t *testing.T) {
	tests := []struct{ line, grpc, http string }{
		{`{"@message":"listening","grpc":"127.0.0.1:1","http":"127.0.0.1:2","level":"info","tls":false}`, "127.0.0.1:1", "127.0.0.1:2"},
		{`time="2026-01-01T00:00:00Z" level=info msg=listening grpc="127.0.0.1:3" http="127.0.0.1:4" tls=false`, "127.0.0.1:3", "127.0.0.1:4"},
	}
	for _, tt := range tests {
		g, h := listenRE.grpc.FindStringSubmatch(tt.line), listenRE.http.FindStringSubmatch(tt.line)
		if g == nil || h == nil || g[1] != tt.grpc || h[1] != tt.http {
			t.Errorf("%s: grpc %v http %v, want %s %s", tt.line, g, h, tt.grpc, tt.http)
		}
	}
}
