package gateway

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// TestInspectedUpstreamErrorLogsNoHeaderValue: header values are never
// logged, also when an inspected host answers with a broken head that
// quotes the request's credential back, as real services quote request
// headers in their error bodies. net/http's own errors quote the line
// they could not read ("malformed MIME header line: ..."); the close
// record's error must say what was wrong without it. The sandbox's
// Authorization is its own (no --secret), so no secret's redaction
// covers it.
func TestInspectedUpstreamErrorLogsNoHeaderValue(t *testing.T) {
	const token = "tok-7f3a9c-userkey"
	for _, tt := range []struct {
		name   string
		answer func(auth string) string
		body   bool // broken in the body (a trailer): the head came through
	}{
		{"status code", func(auth string) string { return "HTTP/1.1 " + strings.TrimPrefix(auth, "Bearer ") + " OK\r\n\r\n" }, false},
		{"status line", func(auth string) string { return auth + "\r\n\r\n" }, false},
		{"header line", func(auth string) string { return "HTTP/1.1 200 OK\r\n" + auth + "\r\nContent-Length: 0\r\n\r\n" }, false},
		{"content length", func(auth string) string {
			return "HTTP/1.1 200 OK\r\nContent-Length: " + auth + "\r\n\r\n"
		}, false},
		{"trailer line", func(auth string) string {
			return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n" + auth + "\r\n\r\n"
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := rawAnswerUpstream(t, "Authorization", tt.answer)
			g, port, roots := inspectedUpstream(t, up, netpolicy.Rule{Host: "example.com", Action: netpolicy.Allow, Inspect: true}, nil)
			proxy, _ := url.Parse("http://" + g.addr)
			tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}
			t.Cleanup(tr.CloseIdleConnections)
			req, _ := http.NewRequest("GET", "https://example.com:"+port.String()+"/v1/x", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if !tt.body && resp.StatusCode != http.StatusBadGateway {
				t.Errorf("got %d, want 502", resp.StatusCode)
			}
			closeRec := lastClose(t, g, decisionlog.KindHTTPS)
			if e, _ := closeRec["error"].(string); e == "" {
				t.Fatalf("close record %v, want one with the upstream's error", closeRec)
			}
			if log := logText(g.ring); strings.Contains(log, token) {
				t.Errorf("the request's Authorization value reached the decision log:\n%s", log)
			}
			t.Logf("close record error: %s", fmt.Sprint(closeRec["error"]))
		})
	}
}

// rawAnswerUpstream is an unstarted upstream that writes answer(the
// request's header field) on the bare connection and closes it: a broken
// answer that quotes the request back, as real services' errors do.
func rawAnswerUpstream(t *testing.T, header string, answer func(string) string) *httptest.Server {
	return httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		io.WriteString(c, answer(r.Header.Get(header)))
	}))
}
