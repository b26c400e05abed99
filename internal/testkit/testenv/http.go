// Package testhttp sends one HTTP request from a test and hands back what
// tests of sluice's HTTP endpoints compare: the status code and the body as
// text. A request that gets no response, or whose body cannot be read,
// fails the test.

package testenv

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// HTTPDo sends a method request with body to url through http.DefaultClient,
// with the headers given as alternating names and values, and returns the
// response's status code and body.
func HTTPDo(t testing.TB, method, url, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the body: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}

// HTTPGet is HTTPDo with GET and no body.
func HTTPGet(t testing.TB, url string, header ...string) (int, string) {
	t.Helper()
	return HTTPDo(t, http.MethodGet, url, "", header...)
}

// HTTPPost is HTTPDo with POST of a JSON body.
func HTTPPost(t testing.TB, url, body string) (int, string) {
	t.Helper()
	return HTTPDo(t, http.MethodPost, url, body, "Content-Type", "application/json")
}
