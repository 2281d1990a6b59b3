package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// RuleMockLLM is the rule of the records of requests a mock LLM answered
// (Config.MockLLM) and of the CONNECTs to its hosts.
const RuleMockLLM = "mock-llm"

// mocks are the scripted LLMs that answer for the gateway
// (docs/mock-llm.md): the Responders of Config.MockLLM, by normalized host,
// and of Config.LLMScripts, by name; the journal they write; which of them
// answers a request; and how a request they answer is served and logged.
// The server makes them in New and keeps them in its field mocks; they
// are fixed from then on, and safe for concurrent use.
type mocks struct {
	hosts    map[string]*mockllm.Responder // Config.MockLLM, by normalized host
	scripts  map[string]*mockllm.Responder // Config.LLMScripts, by name
	inspects bool                          // the gateway has a CA (Config.CA)
	limits   *Limits                       // the server's
	out      *recordOut                    // the ids of the records of a WebSocket's messages
	// finish completes and writes the record of a request a mock answered
	// (Server.finishRefusal).
	finish func(rec *decisionlog.Record, d netpolicy.Decision, status int, start time.Time)
}

// newMocks returns the mocks of cfg, for a server whose limits, record ids
// and finish are these.
func newMocks(cfg Config, limits *Limits, out *recordOut, finish func(*decisionlog.Record, netpolicy.Decision, int, time.Time)) (*mocks, error) {
	hosts, err := normalizeMocks(cfg.MockLLM)
	if err != nil {
		return nil, err
	}
	for name, r := range cfg.LLMScripts {
		if r == nil {
			return nil, fmt.Errorf("gateway: Config.LLMScripts %q has no Responder", name)
		}
	}
	return &mocks{hosts: hosts, scripts: maps.Clone(cfg.LLMScripts), inspects: cfg.CA != nil, limits: limits, out: out, finish: finish}, nil
}

// normalizeMocks returns mocks keyed by normalized host.
func normalizeMocks(mocks map[string]*mockllm.Responder) (map[string]*mockllm.Responder, error) {
	if len(mocks) == 0 {
		return nil, nil
	}
	out := make(map[string]*mockllm.Responder, len(mocks))
	for host, r := range mocks {
		h, err := netpolicy.NormalizeHost(host)
		if err != nil {
			return nil, fmt.Errorf("gateway: Config.MockLLM host %q: %w", host, err)
		}
		if r == nil {
			return nil, fmt.Errorf("gateway: Config.MockLLM host %q has no Responder", host)
		}
		if _, dup := out[h]; dup {
			return nil, fmt.Errorf("gateway: Config.MockLLM names %s twice", h)
		}
		out[h] = r
	}
	return out, nil
}

// checkLLMScripts returns why p cannot run on this gateway: a rule of p
// answers with an LLM script that Config.LLMScripts does not hold. It is
// the Store's check (netpolicy.Store.AddCheck): scripts are read once,
// when the sandbox starts, never because a policy changed.
func (m *mocks) checkLLMScripts(p *netpolicy.Policy) error {
	for _, r := range p.Rules() {
		if r.Response == nil || r.Response.LLM == "" || m.scripts[r.Response.LLM] != nil {
			continue
		}
		if len(m.scripts) == 0 {
			return fmt.Errorf("%w: rule %s: response: llm: %q: this gateway holds no LLM script; scripts are read when a sandbox starts, from the policy file it starts with (sbx run --policy FILE, sbx kube run --policy FILE), never by a policy change", netpolicy.ErrInvalidRule, r.ID, r.Response.LLM)
		}
		names := slices.Sorted(maps.Keys(m.scripts))
		return fmt.Errorf("%w: rule %s: response: llm: %q was not read when this gateway started; it holds %s. Scripts are read when a sandbox starts, from the policy file it starts with (sbx run --policy FILE, sbx kube run --policy FILE), never by a policy change; name one of these, or queue turns on one with sbx mock expect --script NAME", netpolicy.ErrInvalidRule, r.ID, r.Response.LLM, quoteList(names))
	}
	return nil
}

// quoteList is names quoted and joined with ", ".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// MockJournalName is how messages name the mocks' journal file
// (Config.MockJournal).
const MockJournalName = "mock journal"

// openJournal opens the mocks' journal file at path as the decision log
// is opened (appending to what it holds when appendTo), and sets every
// mock's Responder to write its journal there; nil when there are no
// mocks. It is called before the gateway serves.
func (m *mocks) openJournal(path string, appendTo bool) (*mockllm.JournalFile, error) {
	if len(m.hosts)+len(m.scripts) == 0 {
		return nil, nil
	}
	f, err := decisionlog.OpenFile(path, MockJournalName, appendTo)
	if err != nil {
		return nil, err
	}
	jf := mockllm.NewJournalFile(f)
	// Named as the management API names them: the host, or "script NAME".
	for _, h := range slices.Sorted(maps.Keys(m.hosts)) {
		m.hosts[h].Journal = jf.Sink(h, h, "")
	}
	for _, n := range slices.Sorted(maps.Keys(m.scripts)) {
		m.scripts[n].Journal = jf.Sink("", "script "+n, n)
	}
	return jf, nil
}

// mockAnswer is a scripted LLM that answers a request: its Responder, the
// rule its records name, and the command that shows its journal.
type mockAnswer struct {
	m             *mockllm.Responder
	rule, journal string
}

// answerFor returns the mock that answers a request to host decided as *d:
// host's --mock-llm (Config.MockLLM), whatever *d says, or the script of
// *d's llm response (Config.LLMScripts); nil when neither. An llm response
// naming a script this gateway does not hold, which the Store's check
// keeps out, turns *d into a refusal whatever the mode, so that it is
// never answered as an empty canned response.
func (m *mocks) answerFor(host string, d *netpolicy.Decision) *mockAnswer {
	if r := m.forHost(host); r != nil {
		return &mockAnswer{m: r, rule: RuleMockLLM, journal: "sbx mock requests --host " + host}
	}
	if d.Action != netpolicy.Intercept || d.Response == nil || d.Response.LLM == "" {
		return nil
	}
	name := d.Response.LLM
	if r := m.scripts[name]; r != nil {
		return &mockAnswer{m: r, rule: d.Rule, journal: "sbx mock requests --script " + name}
	}
	*d = netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleInvalid,
		Reason: fmt.Sprintf("rule %s answers with the LLM script %q, which this gateway did not load", d.Rule, truncate(name, 200))}
	return nil
}

// forHost returns the Responder for host (normalized), or nil.
func (m *mocks) forHost(host string) *mockllm.Responder {
	return m.hosts[host]
}

// tunnelDecision is how a tunnel to a mocked host is decided: let in
// to be inspected, whatever the policy says, since no byte of it goes
// anywhere but to the mock; or, with no CA to inspect it, refused, since
// it would reach the real API.
func (m *mocks) tunnelDecision(host string) netpolicy.Decision {
	if !m.inspects {
		return netpolicy.Decision{Action: netpolicy.Block, Rule: RuleMockLLM,
			Reason: fmt.Sprintf("the mock LLM for %s answers HTTPS only with TLS inspection, and this gateway has no CA (give it one, or use an http:// base URL)", host)}
	}
	return netpolicy.Decision{Action: netpolicy.Allow, Rule: RuleMockLLM,
		Reason: fmt.Sprintf("the mock LLM answers for %s; its requests are inspected", host)}
}

// mockReason is the reason of the record of a request the mock answered:
// its outcome, which names the turn or the fault. An unmatched request's
// outcome describes the request from its body (the model, the start of the
// last user message); the decision log keeps no body, so the reason keeps
// only what went wrong and points at the journal (journal, the command
// that shows it), which has the rest.
func mockReason(j mockllm.Journaled, journal string) string {
	if !j.Unmatched {
		return decisionlog.ReasonMockLLM + j.Outcome
	}
	why, _, _ := strings.Cut(j.Outcome, " (")
	return fmt.Sprintf("%s%s; request %d of the mock's journal says more (%s)", decisionlog.ReasonMockLLM, why, j.Seq, journal)
}

// serve answers a request with a's Responder and logs it as an
// intercept by a's rule, its reason the Responder's outcome, once the
// Responder has chosen its answer. When the Responder cuts the connection
// it panics with http.ErrAbortHandler after the record is written; the
// caller's server closes the connection.
//
// A WebSocket of the Responses API (a GET /v1/responses upgrade the
// Responder accepts) carries many requests: each response.create message
// is logged as a request of its own, with a record id of its own, the
// upgrade's method and path, and the status its POST would have had.
func (m *mocks) serve(a *mockAnswer, w http.ResponseWriter, r *http.Request, rec *decisionlog.Record, start time.Time) {
	logged := false
	next := *rec // the record of a WebSocket's next message, before rec is filled in
	defer func() {
		if !logged { // the Responder panicked before deciding, or a WebSocket closed unused: log it all the same
			reason, status := "no answer", 0
			if isWebSocket(r.Header) {
				reason, status = "a WebSocket closed without a response.create", http.StatusSwitchingProtocols
			}
			m.finish(rec, netpolicy.Decision{Action: netpolicy.Intercept, Rule: a.rule, Reason: decisionlog.ReasonMockLLM + reason}, status, start)
		}
	}()
	a.m.Serve(w, r, func(j mockllm.Journaled) {
		rec := rec
		if logged {
			rec = new(decisionlog.Record)
			*rec = next
			rec.ID = m.out.newID()
		}
		if j.WebSocket {
			start = j.Time // when the message came
		}
		logged = true
		m.finish(rec, netpolicy.Decision{Action: netpolicy.Intercept, Rule: a.rule, Reason: mockReason(j, a.journal)}, j.Status, start)
	})
}

// serveHTTP answers a plain HTTP request (forwardHTTP's, of the
// proxy or of a redirected connection) to a mocked host with its
// Responder, writing the answer to the client's connection through a
// connResponseWriter. It reports whether the connection may carry
// another request: not when the Responder cut the answer, the answer's
// framing needs the connection's end, or the body was not all read.
func (m *mocks) serveHTTP(ctx context.Context, c *conn, head *requestHead, u *url.URL, a *mockAnswer, rec *decisionlog.Record, start time.Time) (keepAlive bool) {
	idle := m.limits.IdleConnTimeout
	body := &countingReader{}
	req := &http.Request{
		Method: head.Method, URL: &url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery},
		Proto: "HTTP/1." + strconv.Itoa(head.ProtoMinor), ProtoMajor: 1, ProtoMinor: head.ProtoMinor,
		Header: head.Header.Clone(), Host: u.Host, RequestURI: u.RequestURI(), Body: http.NoBody, // the head's is the connection's, reused
	}
	switch {
	case head.Chunked:
		body.r = &deadlineReader{r: httputil.NewChunkedReader(c.br), c: c.Conn, idle: idle}
		body.atEOF = func() error { return skipTrailers(c.br, m.limits.MaxHeaderBytes) }
		req.ContentLength, req.Body = -1, io.NopCloser(body)
	case head.ContentLength > 0:
		body.r = &deadlineReader{r: io.LimitReader(c.br, head.ContentLength), c: c.Conn, idle: idle}
		req.ContentLength, req.Body = head.ContentLength, io.NopCloser(body)
	default:
		body.eof.Store(true)
	}
	if (head.Chunked || head.ContentLength > 0) && head.ProtoMinor == 1 && strings.EqualFold(head.Header.Get("Expect"), "100-continue") {
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
	}
	// The request's context ends when the client hangs up, so that a
	// stalled or delayed answer does not hold the connection: once the
	// body is read, a watcher waits for the client's next byte or its end.
	// It ends when the client sends or closes, or when the read deadline
	// set after the answer wakes it.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var watch chan struct{}
	startWatch := func() {
		watch = make(chan struct{})
		c.SetReadDeadline(time.Time{}) // here, not in the goroutine: stopWatch's deadline must come after
		go func() {
			defer close(watch)
			if _, err := c.br.Peek(1); err != nil {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					cancel()
				}
			}
		}()
	}
	stopWatch := func() {
		if watch != nil {
			c.SetReadDeadline(time.Now())
			<-watch
			c.SetReadDeadline(time.Time{})
		}
	}
	req = req.WithContext(rctx)
	w := newConnResponseWriter(&deadlineWriter{c: c.Conn, idle: idle}, head.ProtoMinor, head.Close)
	w.noBody = head.Method == http.MethodHead
	w.beforeAnswer = func() {
		if body.eof.Load() {
			startWatch()
		}
	}
	defer func() {
		stopWatch()
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			w.bw.Flush()
			keepAlive = false
		}
	}()
	m.serve(a, w, req, rec, start)
	err := w.finish()
	return err == nil && !w.close && body.eof.Load()
}

// connResponseWriter is an http.ResponseWriter that writes an HTTP/1.x
// answer to a client's connection: the status line and headers, then the
// body framed by its Content-Length, chunked (HTTP/1.1) or ended by the
// connection's close (HTTP/1.0). Flush sends what is buffered, for event
// streams. It is used by one goroutine.
type connResponseWriter struct {
	bw           *bufio.Writer
	header       http.Header
	minor        int
	wroteHeader  bool
	chunked      bool
	close        bool // the connection ends with the answer
	noBody       bool // an answer to HEAD: the head alone (RFC 9110 §9.3.2)
	err          error
	beforeAnswer func() // called once, before the head is written
}

func newConnResponseWriter(w io.Writer, protoMinor int, close bool) *connResponseWriter {
	return &connResponseWriter{bw: bufio.NewWriterSize(w, 16<<10), header: http.Header{}, minor: protoMinor, close: close}
}

func (w *connResponseWriter) Header() http.Header { return w.header }

func (w *connResponseWriter) WriteHeader(status int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	if w.beforeAnswer != nil {
		w.beforeAnswer()
	}
	if w.header.Get("Content-Length") == "" && !w.noBody {
		if w.minor >= 1 {
			w.chunked = true
			w.header.Set("Transfer-Encoding", "chunked")
		} else {
			w.close = true
		}
	}
	if w.close {
		w.header.Set("Connection", "close")
	}
	if w.header.Get("Date") == "" {
		w.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	fmt.Fprintf(w.bw, "HTTP/1.%d %03d %s\r\n", w.minor, status, http.StatusText(status))
	w.header.Write(w.bw)
	_, w.err = w.bw.WriteString("\r\n")
}

func (w *connResponseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 || w.noBody {
		return len(p), nil
	}
	if w.chunked {
		fmt.Fprintf(w.bw, "%x\r\n", len(p))
	}
	n, err := w.bw.Write(p)
	if err == nil && w.chunked {
		_, err = w.bw.WriteString("\r\n")
	}
	w.err = err
	return n, err
}

// FlushError sends what is buffered; http.ResponseController calls it.
func (w *connResponseWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	return w.err
}

// finish ends the answer: the last chunk, then a flush.
func (w *connResponseWriter) finish() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked && w.err == nil {
		_, w.err = w.bw.WriteString("0\r\n\r\n")
	}
	return w.FlushError()
}
