package gateway

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// TestFaultInspectedUpstreamFailure: when an inspected request's upstream
// cuts its answer short, the client's response fails (HTTP/1.1: no
// chunked terminator; HTTP/2: the stream is reset) instead of ending as if
// whole, and the close record has the error.
func TestFaultInspectedUpstreamFailure(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "the start of the answer")
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
		panic(http.ErrAbortHandler) // the connection ends without the last chunk
	}))
	up.EnableHTTP2 = true
	up.Config.ErrorLog = log.New(io.Discard, "", 0)
	g, port, clientRoots := inspectedUpstream(t, up, netpolicy.Rule{Host: "example.com", Inspect: true, Action: netpolicy.Allow}, nil)
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			resp, err := inspectedClient(t, g, clientRoots, h2).Get("https://example.com:" + strconv.Itoa(int(port)) + "/")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Errorf("the client read %q and a clean end, want an error after the upstream cut the answer", body)
			}
			if rec := lastClose(t, g, decisionlog.KindHTTPS); rec["error"] == "" {
				t.Errorf("close record %v has no error", rec)
			}
		})
	}
}
