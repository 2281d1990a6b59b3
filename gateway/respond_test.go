package gateway

import (
	"io"
	"net/http"
	"testing"

	"github.com/sbx-dev/sbx/netpolicy"
)

// TestAnswersToHEAD: what the gateway answers itself to HEAD on a kept
// connection (a block, an intercept) is the head alone, with the body's
// Content-Length, so the next answer is read where it starts.
func TestAnswersToHEAD(t *testing.T) {
	g := startGateway(t, netpolicy.Spec{Default: netpolicy.Block, Rules: []netpolicy.Rule{
		{Host: "i.test", Action: netpolicy.Intercept, Response: &netpolicy.Response{Status: 200, Body: "canned"}},
	}}, nil)
	c, br := dialRaw(t, g.addr)
	for _, tt := range []struct {
		method, url string
		status      int
		body        string
	}{
		{"HEAD", "http://x.test/", http.StatusForbidden, ""},
		{"HEAD", "http://i.test/", http.StatusOK, ""},
		{"GET", "http://i.test/", http.StatusOK, "canned"},
	} {
		io.WriteString(c, tt.method+" "+tt.url+" HTTP/1.1\r\nHost: "+tt.url[7:len(tt.url)-1]+"\r\n\r\n")
		resp, err := http.ReadResponse(br, &http.Request{Method: tt.method})
		if err != nil {
			t.Fatalf("%s %s: %v (a body after the head of an earlier answer?)", tt.method, tt.url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tt.status || string(b) != tt.body || resp.ContentLength <= 0 {
			t.Errorf("%s %s: got %d %q (Content-Length %d), want %d %q and the body's length", tt.method, tt.url, resp.StatusCode, b, resp.ContentLength, tt.status, tt.body)
		}
	}
}
