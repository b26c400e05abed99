package testenv

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The server echoes what reached it, so each helper is seen to send the
// method, headers and body it was given and to return status and body.
func TestHelpersSendAndReturn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, r.Method+" "+r.Header.Get("Content-Type")+" "+r.Header.Get("Authorization")+" "+string(b))
	}))
	defer srv.Close()
	tests := []struct {
		name string
		send func() (int, string)
		want string
	}{
		{"get", func() (int, string) { return HTTPGet(t, srv.URL) }, "GET   "},
		{"get with header", func() (int, string) { return HTTPGet(t, srv.URL, "Authorization", "Bearer x") }, "GET  Bearer x "},
		{"post", func() (int, string) { return HTTPPost(t, srv.URL, `{"a":1}`) }, `POST application/json  {"a":1}`},
		{"do", func() (int, string) { return HTTPDo(t, http.MethodPut, srv.URL, "b") }, "PUT   b"},
	}
	for _, tt := range tests {
		code, body := tt.send()
		if code != http.StatusTeapot || body != tt.want {
			t.Errorf("%s: %d %q, want %d %q", tt.name, code, body, http.StatusTeapot, tt.want)
		}
	}
}
