package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/decisionlog/decisionlogtest"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The doors of TestPipelineFourDoors: the ways a request reaches the
// pipeline.
const (
	doorNameProxy       = "proxy"        // GET http://host:port/p to the proxy
	doorNameInspected   = "inspected"    // CONNECT host:port, then GET /p over TLS the gateway terminates
	doorNameConnect     = "connect"      // CONNECT host:port, spliced, then GET /p over TLS with the upstream through it
	doorNameCapturedHTP = "captured"     // a captured connection to the name's fake address, speaking plain HTTP
	doorNameCapturedTLS = "captured-tls" // a captured connection speaking TLS, decided by its server name and spliced
)

var pipelineDoors = []string{doorNameProxy, doorNameInspected, doorNameConnect, doorNameCapturedHTP, doorNameCapturedTLS}

// pipelineCase is a row of TestPipelineFourDoors: a request for host,
// what the client gets, and the decision record every door logs for it.
type pipelineCase struct {
	name     string
	host     string
	header   string           // a header field line the request carries, "" for none
	answer   *approval.Answer // the answer to the question the request asks
	logFault bool             // the decision log's file fails (ENOSPC) while the request is decided
	status   int              // the status the client gets
	want     decisionlog.Record

	// except says, for a door that cannot express the case as a
	// request does, why and what that door does instead.
	except map[string]doorAnswer
}

// doorAnswer is what a door that cannot express a case does instead.
type doorAnswer struct {
	why    string
	status int
	want   decisionlog.Record
	kind   string // the record's kind, when it is not the door's
}

// pipelineDoorKinds is the kind of the decision records of each door.
var pipelineDoorKinds = map[string]string{
	doorNameProxy: decisionlog.KindHTTP, doorNameInspected: decisionlog.KindHTTPS, doorNameConnect: decisionlog.KindConnect,
	doorNameCapturedHTP: decisionlog.KindTransparent, doorNameCapturedTLS: decisionlog.KindTransparent,
}

// pipelineRecordFields are the fields of a decision record that depend on
// the door and are not compared: the door's kind, method (CONNECT, or none
// for a captured tunnel) and path (none for a tunnel), the client and the
// connection id, the policy's version, the time and who the client is.
var pipelineRecordFields = cmpopts.IgnoreFields(decisionlog.Record{},
	"V", "Seq", "ID", "Time", "Duration", "Sandbox", "Client", "Kind", "Method", "Path", "PolicyVersion", "PID", "Comm", "Exe", "Proto")

// TestPipelineFourDoors runs one table of cases through every door of the
// gateway, against real listeners on loopback, and wants the same answer
// and the same decision record from each: the pipeline decides them all.
// A captured connection decided as a tunnel answers nothing (its client
// does not know the gateway is there): where the others answer a refusal,
// it is closed, status 0 in its record and for its client.
func TestPipelineFourDoors(t *testing.T) {
	up := startPipelineUpstream(t)
	port := up.port
	placeholder := func() string { return up.secret.Placeholder() }
	record := func(host, action, rule, reason string, status int) decisionlog.Record {
		return decisionlog.Record{Event: decisionlog.EventDecision, Host: host, Port: int(port), Action: action, Enforced: true, Rule: rule, Reason: reason, Status: status}
	}
	tunnelCannot := "a tunnel has no header fields: the placeholder inside it is never read"
	cases := []pipelineCase{
		{name: "allow", host: "allow.test", status: 200,
			want: withAddrs(record("allow.test", "allow", "allow", "rule allow: allow allow.test", 0), "")},
		{name: "block", host: "block.test", status: 403,
			want: record("block.test", "block", "block", "rule block: block block.test", 403),
			except: map[string]doorAnswer{
				doorNameInspected: {why: "no request through the tunnel could be allowed, so the tunnel itself is refused (DecideTunnel)",
					status: 403, want: record("block.test", "block", "block", "rule block: block block.test", 403), kind: decisionlog.KindConnect},
			}},
		{name: "intercept", host: "canned.test", status: 418,
			want: record("canned.test", "intercept", "canned", "rule canned: intercept canned.test", 418),
			except: map[string]doorAnswer{
				doorNameConnect: {why: "a spliced tunnel carries no request the gateway could answer: the intercept is a block of its rule",
					status: 403, want: record("canned.test", "block", "canned", "an HTTPS intercept needs TLS inspection, and this gateway has no CA", 403)},
				doorNameCapturedTLS: {why: "a captured TLS connection the gateway does not inspect carries no request it could answer",
					want: record("canned.test", "block", "canned", "an intercept answers HTTP requests; this connection does not speak plain HTTP", 0)},
			}},
		{name: "ask answered allow", host: "ask.test", answer: &approval.Answer{Allow: true, Scope: approval.ScopeOnce, By: approval.ByCLI}, status: 200,
			want: withAddrs(record("ask.test", "allow", "ask", "rule ask: ask ask.test; allowed once by cli", 0), "")},
		{name: "ask answered deny", host: "ask.test", answer: &approval.Answer{Allow: false, Scope: approval.ScopeOnce, By: approval.ByCLI}, status: 403,
			want: withAddrs(record("ask.test", "block", "ask", "rule ask: ask ask.test; denied once by cli", 403), "")},
		{name: "secret misuse", host: "allow.test", header: "X-Key: " + placeholder(), status: 403,
			want: withSecret(record("allow.test", "block", secrets.Rule, "secret API_KEY's placeholder sent to allow.test", 403), "API_KEY"),
			except: map[string]doorAnswer{
				doorNameConnect:     {why: tunnelCannot, status: 200, want: withAddrs(record("allow.test", "allow", "allow", "rule allow: allow allow.test", 0), "")},
				doorNameCapturedTLS: {why: tunnelCannot, status: 200, want: withAddrs(record("allow.test", "allow", "allow", "rule allow: allow allow.test", 0), "")},
			}},
		{name: "address guard", host: "private.test", status: 403,
			want: withAddrs(record("private.test", "block", netpolicy.RuleGuard, "address guard: 10.0.0.1 is private (RFC 1918)", 403), "10.0.0.1")},
		{name: "mock", host: "llm.test", status: 404,
			want: record("llm.test", "intercept", RuleMockLLM, "mock LLM: default: not a model endpoint: 404", 404),
			except: map[string]doorAnswer{
				doorNameConnect: {why: "the mock answers HTTPS only in a tunnel the gateway inspects, and this one has no CA",
					status: 403, want: record("llm.test", "block", RuleMockLLM, "the mock LLM for llm.test answers HTTPS only with TLS inspection, and this gateway has no CA (give it one, or use an http:// base URL)", 403)},
				doorNameCapturedTLS: {why: "the mock answers HTTPS only in a connection the gateway inspects, and this one has no CA",
					want: record("llm.test", "block", RuleMockLLM, "the mock LLM for llm.test answers HTTPS only with TLS inspection, and this gateway has no CA (give it one, or use an http:// base URL)", 0)},
			}},
		{name: "log failure", host: "allow.test", logFault: true, status: 403,
			want: record("allow.test", "block", netpolicy.RuleGuard, "LOG", 403)},
	}
	for _, c := range cases {
		for _, door := range pipelineDoors {
			t.Run(c.name+"/"+door, func(t *testing.T) {
				status, want, kind := c.status, c.want, pipelineDoorKinds[door]
				if e, ok := c.except[door]; ok {
					t.Logf("%s cannot express this case: %s", door, e.why)
					status, want = e.status, e.want
					if e.kind != "" {
						kind = e.kind
					}
				} else if door == doorNameCapturedTLS && want.Action == "block" {
					status, want.Status = 0, 0 // closed unanswered
				}
				got, gotRec := up.run(t, door, c)
				if got != status {
					t.Errorf("the client got %d, want %d", got, status)
				}
				if gotRec.Kind != kind {
					t.Errorf("the decision record's kind is %q, want %q", gotRec.Kind, kind)
				}
				if diff := cmp.Diff(want, gotRec, pipelineRecordFields); diff != "" {
					t.Errorf("decision record (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func withAddrs(r decisionlog.Record, addrs string) decisionlog.Record { r.Addrs = addrs; return r }
func withSecret(r decisionlog.Record, name string) decisionlog.Record { r.Secret = name; return r }

// pipelineUpstream is the upstream of every host of TestPipelineFourDoors:
// one port on loopback that speaks plain HTTP and, to a client whose first
// byte starts a TLS handshake, HTTPS with a certificate from roots.
type pipelineUpstream struct {
	port   netpolicy.Port
	roots  *x509.CertPool
	secret *secrets.Secret // API_KEY, bound to bound.test on port
}

func startPipelineUpstream(t *testing.T) *pipelineUpstream {
	t.Helper()
	ca, err := NewCA("upstream", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return ca.Leaf(h.ServerName) }}
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "upstream "+r.Method+" "+r.URL.Path)
	})}
	go srv.Serve(sniffListener{Listener: ln, conf: conf})
	t.Cleanup(func() { srv.Close() })
	u := &pipelineUpstream{port: netpolicy.Port(ln.Addr().(*net.TCPAddr).Port), roots: x509.NewCertPool()}
	u.roots.AddCert(ca.Certificate())
	if u.secret, err = secrets.New("API_KEY", valueA, []string{"bound.test:" + u.port.String()}); err != nil {
		t.Fatal(err)
	}
	return u
}

// sniffListener serves TLS on the connections whose first byte starts a
// handshake, plain bytes on the others.
type sniffListener struct {
	net.Listener
	conf *tls.Config
}

func (l sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, conf: l.conf}, nil
}

// sniffConn looks at its first byte on its first read or write.
type sniffConn struct {
	net.Conn
	conf  *tls.Config
	once  sync.Once
	inner net.Conn
}

func (c *sniffConn) sniff() {
	c.once.Do(func() {
		br := bufio.NewReader(c.Conn)
		pc := &peekedConn{Conn: c.Conn, r: br}
		c.inner = pc
		if b, err := br.Peek(1); err == nil && b[0] == 0x16 {
			c.inner = tls.Server(pc, c.conf)
		}
	})
}

func (c *sniffConn) Read(p []byte) (int, error)  { c.sniff(); return c.inner.Read(p) }
func (c *sniffConn) Write(p []byte) (int, error) { c.sniff(); return c.inner.Write(p) }

// peekedConn reads through r, what a bufio.Reader over its Conn holds first.
type peekedConn struct {
	net.Conn
	r io.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// pipelineGateway starts a gateway for door: a policy that blocks all but
// its rules (each inspected for the inspected door, whose gateway alone
// has a CA), the mock LLM answering for llm.test, API_KEY bound to
// bound.test, and a decision log whose file fails on demand (fault; the
// file is at logPath). For a captured door it serves the transparent
// path too (tg).
func (u *pipelineUpstream) pipelineGateway(t *testing.T, door string) (g *testGateway, tg *transparentGateway, ca *CA, fault *decisionlogtest.FlakyFile, logPath string) {
	t.Helper()
	ports := []netpolicy.Port{u.port}
	inspect := door == doorNameInspected
	spec := loopbackPolicy(netpolicy.Block,
		netpolicy.Rule{ID: "allow", Host: "allow.test", Ports: ports, Action: netpolicy.Allow, Inspect: inspect},
		netpolicy.Rule{ID: "block", Host: "block.test", Ports: ports, Action: netpolicy.Block},
		netpolicy.Rule{ID: "canned", Host: "canned.test", Ports: ports, Action: netpolicy.Intercept, Inspect: inspect,
			Response: &netpolicy.Response{Status: 418, Body: "teapot"}},
		netpolicy.Rule{ID: "ask", Host: "ask.test", Ports: ports, Action: netpolicy.Ask, Inspect: inspect},
		netpolicy.Rule{ID: "private", Host: "private.test", Ports: ports, Action: netpolicy.Allow, Inspect: inspect},
	)
	static := map[string]string{"allow.test": "127.0.0.1", "block.test": "127.0.0.1", "canned.test": "127.0.0.1",
		"ask.test": "127.0.0.1", "llm.test": "127.0.0.1", "bound.test": "127.0.0.1", "private.test": "10.0.0.1"}
	script, err := mockllm.ParseScript("anthropic.yaml", []byte(mockAnthropicScript))
	if err != nil {
		t.Fatal(err)
	}
	logPath = filepath.Join(t.TempDir(), "decisions.jsonl")
	sink, err := decisionlog.OpenFileSink(logPath, decisionlog.FileSinkOptions{RatePerSecond: decisionlog.NoLimit, MaxBytes: decisionlog.NoLimit})
	if err != nil {
		t.Fatal(err)
	}
	fault = &decisionlogtest.FlakyFile{}
	sink.SetWriteFunc(fault.Write)
	var ring *decisionlog.Ring
	set := func(cfg *serverConfig) {
		ring = decisionlog.NewRing(0)
		cfg.Log = decisionlog.NewLog("", sink, ring)
		cfg.MockLLM = map[string]*mockllm.Responder{"llm.test": mockllm.New(script)}
		cfg.Secrets = []*secrets.Secret{u.secret}
		cfg.UpstreamRoots = u.roots
		if inspect {
			if ca, err = NewCA("test", time.Hour); err != nil {
				t.Fatal(err)
			}
			cfg.CA = ca
		}
	}
	t.Cleanup(func() { sink.Close() })
	if door == doorNameCapturedHTP || door == doorNameCapturedTLS {
		tg = startTransparent(t, spec, static, set)
		tg.ring = ring
		return tg.testGateway, tg, nil, fault, logPath
	}
	g = startGatewayWith(t, spec, static, set)
	g.ring = ring
	return g, nil, ca, fault, logPath
}

// run sends case c's request through door and returns the status the
// client got (0: its connection closed unanswered) and the last decision
// record the gateway logged for c's host.
func (u *pipelineUpstream) run(t *testing.T, door string, c pipelineCase) (int, decisionlog.Record) {
	t.Helper()
	g, tg, ca, fault, logPath := u.pipelineGateway(t, door)
	if c.logFault {
		fault.Set(syscall.ENOSPC, false)
		defer fault.Set(nil, false)
	}
	hostport := net.JoinHostPort(c.host, u.port.String())
	req := "GET /p HTTP/1.1\r\nHost: " + hostport + "\r\nConnection: close\r\n"
	if c.header != "" {
		req += c.header + "\r\n"
	}
	req += "\r\n"
	done := make(chan int, 1)
	go func() {
		done <- u.send(t, door, g, tg, ca, c.host, hostport, req)
	}()
	if c.answer != nil {
		q := waitQuestion(t, g.srv, c.host, uint16(u.port), 1)
		if _, err := g.srv.approvals.Answer(q.ID, *c.answer); err != nil {
			t.Fatal(err)
		}
	}
	var status int
	select {
	case status = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the request never ended")
	}
	rec := lastDecisionFor(t, g, c.host)
	if c.logFault {
		rec.Reason = strings.ReplaceAll(rec.Reason, logPath, "")
		if !strings.HasPrefix(rec.Reason, decisionlog.ReasonLogFault) || !strings.Contains(rec.Reason, "no space left on device") {
			t.Errorf("the log failure's reason %q does not say the log failed with ENOSPC", rec.Reason)
		}
		rec.Reason = "LOG"
	}
	return status, rec
}

// send sends req (a request for hostport, in origin form) through door
// and returns the status the client got, 0 when its connection was
// closed unanswered.
func (u *pipelineUpstream) send(t *testing.T, door string, g *testGateway, tg *transparentGateway, ca *CA, host, hostport, req string) int {
	var conn net.Conn
	var err error
	switch door {
	case doorNameCapturedHTP, doorNameCapturedTLS:
		conn = tg.dial(t, tg.fake(t, host, u.port))
	default:
		if conn, err = net.Dial("tcp", g.addr); err != nil {
			t.Error(err)
			return -1
		}
		defer conn.Close()
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	switch door {
	case doorNameProxy:
		req = strings.Replace(req, "GET /p", "GET http://"+hostport+"/p", 1)
	case doorNameInspected, doorNameConnect:
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostport, hostport)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Errorf("CONNECT: %v", err)
			return -1
		}
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode
		}
	}
	var rw io.ReadWriter = &peekedConn{Conn: conn, r: br}
	switch door {
	case doorNameInspected, doorNameCapturedTLS, doorNameConnect:
		roots := u.roots
		if ca != nil && door != doorNameConnect {
			roots = x509.NewCertPool()
			roots.AddCert(ca.Certificate())
		}
		tc := tls.Client(rw.(net.Conn), &tls.Config{ServerName: host, RootCAs: roots})
		if err := tc.Handshake(); err != nil {
			if door == doorNameCapturedTLS {
				return 0 // closed unanswered
			}
			t.Errorf("TLS handshake: %v", err)
			return -1
		}
		rw, br = tc, bufio.NewReader(tc)
	}
	if _, err := io.WriteString(rw, req); err != nil {
		t.Errorf("writing the request: %v", err)
		return -1
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		if door == doorNameCapturedTLS || door == doorNameCapturedHTP {
			return 0
		}
		t.Errorf("reading the answer: %v", err)
		return -1
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && !strings.HasPrefix(string(body), "upstream GET /p") && !strings.Contains(resp.Header.Get("Content-Type"), "json") {
		t.Errorf("a 200 that is not the upstream's: %q", body)
	}
	return resp.StatusCode
}

// lastDecisionFor waits for the last decision record for host that the
// gateway logged, and decodes it.
func lastDecisionFor(t *testing.T, g *testGateway, host string) decisionlog.Record {
	t.Helper()
	lines, _ := g.ring.Since(0, 10000)
	var last decisionlog.Record
	found := false
	for _, l := range lines {
		var r decisionlog.Record
		if err := decisionlog.Decode(l, &r); err != nil {
			t.Fatalf("record %q: %v", l, err)
		}
		if r.Event == decisionlog.EventDecision && r.Host == host {
			last, found = r, true
		}
	}
	if !found {
		t.Fatalf("no decision record for %s in %d records", host, len(lines))
	}
	return last
}

// TestPipelineStepsDocumented reads the pipeline's steps from the code,
// the calls run makes on the pipeline in their order, and wants the
// package doc and docs/gateway.md to list exactly those, in that order.
func TestPipelineStepsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "pipeline.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "run" || fn.Recv == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "p" {
						steps = append(steps, sel.Sel.Name)
					}
				}
			}
			return true
		})
	}
	if len(steps) < 5 {
		t.Fatalf("found the steps %v in pipeline.run, want its calls of the pipeline's methods", steps)
	}
	line := strings.Join(steps, " → ")
	for _, path := range []string{"doc.go", "../docs/gateway.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var listed []string
		for l := range strings.Lines(string(b)) {
			l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "//"))
			if strings.Count(l, " → ") >= len(steps)-1 {
				listed = append(listed, l)
			}
		}
		if !slices.Equal(listed, []string{line}) {
			t.Errorf("%s lists the pipeline's steps as %q, want exactly one line %q (pipeline.run's order)", path, listed, line)
		}
	}
}
