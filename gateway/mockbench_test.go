package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// benchTurnScript is the mock's script: the turn every request of
// BenchmarkScriptedTurn takes, matched on the model and the user message,
// a text of about an agent's short answer (streamed, 25 deltas of 16
// characters).
const benchTurnScript = `turns:
  - match: {model: claude-sonnet-4-5, user: "list the files"}
    reply:
      text: "I'll list the files in the working directory and then read the test that fails, to see what it expects of the parser. The parser's error for an empty input is what the test checks; it returns nil there. I will change that and run the tests again to confirm. Then I'll look at the other callers of parse to make sure none of them relies on the old behaviour."
      usage: {input_tokens: 1200, output_tokens: 80}
    times: unlimited
`

// BenchmarkScriptedTurn measures a scripted turn answered inside the
// gateway (docs/performance.md: p99 at most 5 ms): a client sends an
// Anthropic Messages request over HTTPS through the gateway to a mocked
// host, which the gateway inspects (TLS terminated with the sandbox's CA)
// and answers from the script, for a JSON reply ("text") and a streamed
// one ("stream"). The baseline is the same request and the same answer
// bytes through the same gateway to an inspected host served by an
// httptest server, sent in the same loop: each iteration sends one of each,
// which goes first alternating, so that the load of a shared machine falls
// on both alike (ns/op is the pair's). A client sends a request at a time,
// as an agent does, on a keep-alive connection to each host, and reads the
// answer to its end; the decision log is written to a file. It reports the
// p50 and p99 of that time for the mock (p50-ms, p99-ms) and the upstream
// (upstream-p50-ms, upstream-p99-ms), and the ratio of the p99s.
func BenchmarkScriptedTurn(b *testing.B) {
	script, err := mockllm.ParseScript("bench.yaml", []byte(benchTurnScript))
	if err != nil {
		b.Fatal(err)
	}
	responder := mockllm.New(script)
	bodies := map[bool]string{}
	for _, stream := range []bool{false, true} {
		bodies[stream] = `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":` + strconv.FormatBool(stream) +
			`,"system":"You are a coding agent.","messages":[{"role":"user","content":[{"type":"text","text":"list the files, then fix the failing test"}]}]}`
	}
	// The upstream answers what the mock does, event by event for a stream.
	answers := map[bool]*httptest.ResponseRecorder{}
	for stream, body := range bodies {
		w := httptest.NewRecorder()
		mockllm.New(script).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(body)))
		if w.Code != http.StatusOK {
			b.Fatalf("the script answered %d: %s", w.Code, w.Body)
		}
		answers[stream] = w
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		a := answers[bytes.Contains(body, []byte(`"stream":true`))]
		w.Header().Set("Content-Type", a.Header().Get("Content-Type"))
		if !strings.HasPrefix(a.Header().Get("Content-Type"), "text/event-stream") {
			w.Header().Set("Content-Length", strconv.Itoa(a.Body.Len()))
			w.Write(a.Body.Bytes())
			return
		}
		rc := http.NewResponseController(w)
		for event := range strings.SplitAfterSeq(a.Body.String(), "\n\n") {
			io.WriteString(w, event)
			rc.Flush()
		}
	}))
	up.Config.ErrorLog = log.New(io.Discard, "", 0)
	up.StartTLS()
	b.Cleanup(up.Close)
	port := portOf(b, up)

	ca, err := NewCA("bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	p, err := netpolicy.Compile(loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{Host: "example.com", Ports: []netpolicy.Port{port}, Path: "/", Action: netpolicy.Allow}))
	if err != nil {
		b.Fatal(err)
	}
	res := &Resolver{}
	res.AddStatic("example.com", netip.MustParseAddr("127.0.0.1"))
	g, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Policy: p, Resolver: res, LogFile: b.TempDir() + "/log.jsonl",
		LogLimits: decisionlog.FileSinkOptions{RatePerSecond: decisionlog.NoLimit, MaxBytes: decisionlog.NoLimit},
		CA:        ca, UpstreamRoots: roots, MockLLM: map[string]*mockllm.Responder{"api.anthropic.com": responder}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	clientRoots := x509.NewCertPool()
	clientRoots.AddCert(up.Certificate())
	clientRoots.AddCert(ca.Certificate())
	pu, _ := url.Parse("http://" + g.ProxyAddr.String())

	urls := map[bool]string{ // by mocked
		false: "https://example.com:" + strconv.Itoa(int(port)) + "/v1/messages",
		true:  "https://api.anthropic.com/v1/messages",
	}
	for _, stream := range []bool{false, true} {
		b.Run(map[bool]string{false: "text", true: "stream"}[stream], func(b *testing.B) {
			tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: clientRoots}}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			want := answers[stream].Body.Len()
			post := func(mocked bool) time.Duration {
				start := time.Now()
				resp, err := c.Post(urls[mocked], "application/json", strings.NewReader(bodies[stream]))
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || n != int64(want) {
					b.Fatalf("got %d, %d bytes, %v; want 200 and the %d bytes of the answer", resp.StatusCode, n, err, want)
				}
				return time.Since(start)
			}
			// The connections and their TLS handshakes, not measured.
			post(true)
			post(false)
			times := map[bool][]time.Duration{}
			i := 0
			for b.Loop() {
				// Alternately first, so that neither always follows the other.
				first := i%2 == 0
				times[first] = append(times[first], post(first))
				times[!first] = append(times[!first], post(!first))
				i++
			}
			pct := func(mocked bool, p int) time.Duration {
				t := times[mocked]
				slices.Sort(t)
				return t[len(t)*p/100]
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(pct(true, 50)), "p50-ms")
			b.ReportMetric(ms(pct(true, 99)), "p99-ms")
			b.ReportMetric(ms(pct(false, 50)), "upstream-p50-ms")
			b.ReportMetric(ms(pct(false, 99)), "upstream-p99-ms")
			b.ReportMetric(float64(pct(true, 99))/float64(pct(false, 99)), "p99/upstream")
		})
	}
}
