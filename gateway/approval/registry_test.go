package approval

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// fakeGateway is the gateway of a test registry: it refuses the targets
// of refuse as the address guard would, and keeps what it is asked to
// guard and to log.
type fakeGateway struct {
	mu      sync.Mutex
	refuse  map[string]bool // by host
	guarded []string
	recs    []decisionlog.Record
}

func (g *fakeGateway) Guard(_ context.Context, _ *netpolicy.Policy, t netpolicy.Target, rec *decisionlog.Record) *netpolicy.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.guarded = append(g.guarded, t.Host)
	if g.refuse[t.Host] {
		rec.Addrs = "127.0.0.1"
		return &netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleGuard, Reason: "address guard: 127.0.0.1 is loopback"}
	}
	return nil
}

func (g *fakeGateway) Emit(rec *decisionlog.Record) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recs = append(g.recs, *rec)
}

// records returns the records logged so far.
func (g *fakeGateway) records() []decisionlog.Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]decisionlog.Record(nil), g.recs...)
}

// testRegistry is a registry over a fake gateway and a store whose
// policy is spec.
type testRegistry struct {
	*Registry
	gw    *fakeGateway
	store *netpolicy.Store
}

func newTestRegistry(t *testing.T, spec netpolicy.Spec, file string, max int) *testRegistry {
	t.Helper()
	p, err := netpolicy.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	tr := &testRegistry{gw: &fakeGateway{refuse: map[string]bool{"loop.test": true}}, store: netpolicy.NewStore(p)}
	tr.Registry, err = New(Config{Store: tr.store, Gateway: tr.gw, File: file, Max: max})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// askSpec asks about everything, with ask_timeout timeout.
func askSpec(timeout time.Duration) netpolicy.Spec {
	return netpolicy.Spec{Default: netpolicy.Ask, AskTimeout: netpolicy.Duration(timeout)}
}

// askVerdict is the ask of the default.
var askVerdict = netpolicy.Decision{Action: netpolicy.Ask, Rule: netpolicy.RuleDefault, Reason: "no rule matched; the default is ask"}

// request is a request to host:port with method and path (CONNECT for a
// tunnel, "" for a captured connection), its record and target.
func request(host string, port uint16, method, path string) (*decisionlog.Record, netpolicy.Target) {
	kind := decisionlog.KindHTTP
	switch method {
	case "CONNECT":
		kind = decisionlog.KindConnect
	case "":
		kind = decisionlog.KindTransparent
	}
	rec := &decisionlog.Record{Kind: kind, Client: "10.213.0.2:40000", Method: method, Host: host, Port: int(port), Path: path}
	return rec, netpolicy.Target{Host: host, Port: port, Method: method, Path: path}
}

// ask asks about a request to host:port with method and path, and wants
// it held.
func (r *testRegistry) ask(t *testing.T, host string, port uint16, method, path string) *Held {
	t.Helper()
	rec, tgt := request(host, port, method, path)
	d, held := r.Ask(context.Background(), rec, r.store.Load(), tgt, askVerdict)
	if held == nil {
		t.Fatalf("%s %s:%d%s: got %+v, want it held", method, host, port, path, d)
	}
	return held
}

// Verdicts that are not asked about come back at once, without a
// question: another verdict as it is, an ask in audit mode, an ask about
// a name the guard refuses (guarded before anything is asked), an ask
// once the registry is closed.
func TestAskSettledWithoutAQuestion(t *testing.T) {
	audit := askSpec(time.Minute)
	audit.Mode = netpolicy.Audit
	allow := netpolicy.Decision{Action: netpolicy.Allow, Rule: "r1", Reason: "rule r1 allows"}
	for _, tt := range []struct {
		name    string
		spec    netpolicy.Spec
		host    string
		d       netpolicy.Decision
		closed  bool
		want    netpolicy.Decision
		guarded []string
	}{
		{name: "allow", spec: askSpec(time.Minute), host: "api.test", d: allow, want: allow},
		{name: "audit", spec: audit, host: "api.test", d: askVerdict,
			want: netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleDefault, Reason: askVerdict.Reason + "; audit mode asks nothing"}},
		{name: "guard", spec: askSpec(time.Minute), host: "loop.test", d: askVerdict, guarded: []string{"loop.test"},
			want: netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleGuard, Reason: "address guard: 127.0.0.1 is loopback"}},
		{name: "closed", spec: askSpec(time.Minute), host: "api.test", d: askVerdict, closed: true, guarded: []string{"api.test"},
			want: netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleDefault, Reason: askVerdict.Reason + "; " + ReasonClosed}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRegistry(t, tt.spec, "", 0)
			if tt.closed {
				r.Close()
			}
			rec, tgt := request(tt.host, 80, "GET", "/")
			got, held := r.Ask(context.Background(), rec, r.store.Load(), tgt, tt.d)
			if held != nil || got != tt.want {
				t.Errorf("got %+v (held %v), want %+v, not held", got, held != nil, tt.want)
			}
			if diff := cmp.Diff(tt.guarded, r.gw.guarded); diff != "" {
				t.Errorf("names guarded (-want +got):\n%s", diff)
			}
			if recs := r.gw.records(); len(recs) != 0 || len(r.List()) != 0 {
				t.Errorf("got records %+v and questions %+v, want none", recs, r.List())
			}
		})
	}
}

// Requests join one question when they show the same host, port, method
// and path (a tunnel's and a captured connection's path do not count);
// the first asks it and logs it.
func TestAskOneQuestionPerHostPortMethodPath(t *testing.T) {
	r := newTestRegistry(t, askSpec(time.Minute), "", 0)
	for _, req := range []struct {
		method, path string
	}{
		{"GET", "/a"}, {"GET", "/a"}, {"GET", "/b"}, {"POST", "/a"},
		{"CONNECT", ""}, {"CONNECT", ""}, {"", ""},
	} {
		r.ask(t, "api.test", 443, req.method, req.path)
	}
	r.ask(t, "api.test", 8443, "GET", "/a")
	type q struct {
		Method, Path string
		Port         uint16
		Waiting      int
	}
	var got []q
	for _, a := range r.List() {
		got = append(got, q{a.Method, a.Path, a.Port, a.Waiting})
	}
	want := []q{{"GET", "/a", 443, 2}, {"GET", "/b", 443, 1}, {"POST", "/a", 443, 1}, {"CONNECT", "", 443, 2}, {"", "", 443, 1}, {"GET", "/a", 8443, 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("questions (-want +got):\n%s", diff)
	}
	asked := 0
	for _, rec := range r.gw.records() {
		if rec.Event != decisionlog.EventApproval || rec.Action != string(netpolicy.Ask) || rec.ApprovalID == "" || rec.Enforced {
			t.Errorf("question record: got %+v, want an approval record of an ask, not enforced, with its id", rec)
		}
		asked++
	}
	if asked != len(want) {
		t.Errorf("question records: got %d, want %d (one per question)", asked, len(want))
	}
}

// Every held request counts toward the bound, those joining a question
// as much as those asking one (the HTTP/2 streams of one connection):
// past it a request is blocked, not asked; an answer frees the bound.
func TestAskBoundCountsEveryHeldRequest(t *testing.T) {
	const bound = 3
	r := newTestRegistry(t, askSpec(time.Minute), "", bound)
	for range bound {
		r.ask(t, "api.test", 443, "GET", "/a")
	}
	rec, tgt := request("api.test", 443, "GET", "/a")
	d, held := r.Ask(context.Background(), rec, r.store.Load(), tgt, askVerdict)
	if held != nil || d.Action != netpolicy.Block || !strings.Contains(d.Reason, fmt.Sprintf("not asked: %d requests are held", bound)) {
		t.Fatalf("past the bound: got %+v (held %v), want a block: not asked", d, held != nil)
	}
	q := r.List()
	if len(q) != 1 || q[0].Waiting != bound {
		t.Fatalf("questions: got %+v, want one with %d waiting", q, bound)
	}
	if _, err := r.Answer(q[0].ID, Answer{Scope: ScopeOnce, By: ByCLI}); err != nil {
		t.Fatal(err)
	}
	r.ask(t, "api.test", 443, "GET", "/a")
}

// What the held request gets: an answer as an allow or a block saying
// who answered, a timeout, the registry closing, or its own end, which
// takes it off its question.
func TestWaitGetsTheAnswer(t *testing.T) {
	reason := func(why string) string { return askVerdict.Reason + "; " + why }
	for _, tt := range []struct {
		name  string
		end   func(r *testRegistry, id string, cancel func())
		want  netpolicy.Decision
		ended bool
	}{
		{"allow once", func(r *testRegistry, id string, _ func()) {
			r.Answer(id, Answer{Allow: true, Scope: ScopeOnce, By: ByCLI})
		},
			netpolicy.Decision{Action: netpolicy.Allow, Rule: netpolicy.RuleDefault, Reason: reason("allowed once by cli")}, true},
		{"deny for the session", func(r *testRegistry, id string, _ func()) { r.Answer(id, Answer{Scope: ScopeSession, By: ByAPI}) },
			netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleDefault, Reason: reason("denied for this session by api")}, true},
		{"timeout", func(*testRegistry, string, func()) {},
			netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleDefault, Reason: reason(ReasonNoAnswer + "1s")}, true},
		{"closed", func(r *testRegistry, _ string, _ func()) { r.Close() },
			netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleDefault, Reason: reason(ReasonClosed)}, true},
		{"the request ended", func(_ *testRegistry, _ string, cancel func()) { cancel() },
			netpolicy.Decision{Action: netpolicy.Block, Rule: netpolicy.RuleDefault, Reason: reason("the request ended before an answer came")}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRegistry(t, askSpec(time.Second), "", 0)
			held := r.ask(t, "api.test", 80, "GET", "/")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tt.end(r, r.List()[0].ID, cancel)
			got, ended := held.Wait(ctx)
			if got != tt.want || ended != tt.ended {
				t.Errorf("got %+v (ended %v), want %+v (ended %v)", got, ended, tt.want, tt.ended)
			}
			if !ended {
				if q := r.List(); len(q) != 1 || q[0].Waiting != 0 {
					t.Errorf("questions after the request ended: got %+v, want its question with none waiting", q)
				}
			}
		})
	}
}

// Every answer, timeouts and Close's included, is logged once as an
// approval record of its question, counting the requests it reaches.
func TestAnswerRecords(t *testing.T) {
	r := newTestRegistry(t, askSpec(time.Second), "", 0)
	allowed := r.ask(t, "api.test", 80, "GET", "/x")
	r.ask(t, "api.test", 80, "GET", "/x")
	timedOut := r.ask(t, "api.test", 81, "CONNECT", "")
	ids := map[string]string{}
	for _, a := range r.List() {
		ids[fmt.Sprint(a.Port, a.Host)] = a.ID
	}
	if _, err := r.Answer(ids["80api.test"], Answer{Allow: true, Scope: ScopeOnce, By: ByUI}); err != nil {
		t.Fatal(err)
	}
	allowed.Wait(context.Background())
	timedOut.Wait(context.Background())
	closed := r.ask(t, "other.test", 80, "", "")
	ids["80other.test"] = r.List()[0].ID
	r.Close()
	closed.Wait(context.Background())
	type answer struct {
		ID, Host, Method, Path, Answer, Scope, By, Action, Reason string
		Count                                                     uint64
		Enforced                                                  bool
	}
	var got []answer
	for _, rec := range r.gw.records() {
		if rec.Answer != "" {
			got = append(got, answer{rec.ApprovalID, rec.Host, rec.Method, rec.Path, rec.Answer, rec.Scope, rec.By, rec.Action, rec.Reason, rec.Count, rec.Enforced})
		}
	}
	want := []answer{
		{ids["80api.test"], "api.test", "GET", "/x", AnswerAllow, "once", ByUI, "allow", "allowed once by ui", 2, true},
		{ids["81api.test"], "api.test", "CONNECT", "", AnswerDeny, "once", ByTimeout, "block", ReasonNoAnswer + "1s", 1, true},
		{ids["80other.test"], "other.test", "", "", AnswerDeny, "once", ByClosed, "block", ReasonClosed, 1, true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answer records (-want +got):\n%s", diff)
	}
}

// A session or always answer adds a rule no wider than its question: a
// request's host, port, method and path; a tunnel's or a captured
// connection's host and port. It goes before the first ask rule, and
// always also writes it to the file.
func TestAnswerRuleNoWiderThanTheQuestion(t *testing.T) {
	first := netpolicy.Rule{ID: "first", Host: "first.test", Action: netpolicy.Allow}
	asks := netpolicy.Rule{ID: "q", Host: "*.test", Ports: []netpolicy.Port{netpolicy.AnyPort}, Action: netpolicy.Ask}
	for _, tt := range []struct {
		method, path string
		scope        Scope
		allow        bool
		want         netpolicy.Rule
		file         string // in the approvals file after
	}{
		{"GET", "/v1/x", ScopeSession, true, netpolicy.Rule{Host: "api.test", Ports: []netpolicy.Port{443}, Methods: []string{"GET"}, Path: "/v1/x", Action: netpolicy.Allow}, ""},
		{"post", "/v1/x", ScopeSession, false, netpolicy.Rule{Host: "api.test", Ports: []netpolicy.Port{443}, Methods: []string{"POST"}, Path: "/v1/x", Action: netpolicy.Block}, ""},
		{"CONNECT", "", ScopeSession, true, netpolicy.Rule{Host: "api.test", Ports: []netpolicy.Port{443}, Action: netpolicy.Allow}, ""},
		{"", "", ScopeSession, false, netpolicy.Rule{Host: "api.test", Ports: []netpolicy.Port{443}, Action: netpolicy.Block}, ""},
		{"GET", "/v1/x", ScopeAlways, true, netpolicy.Rule{Host: "api.test", Ports: []netpolicy.Port{443}, Methods: []string{"GET"}, Path: "/v1/x", Action: netpolicy.Allow}, "path: /v1/x"},
		{"CONNECT", "", ScopeAlways, false, netpolicy.Rule{Host: "api.test", Ports: []netpolicy.Port{443}, Action: netpolicy.Block}, "action: block"},
	} {
		t.Run(fmt.Sprintf("%s %s %s %v", tt.scope, tt.method, tt.path, tt.allow), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "approvals.yaml")
			if err := os.WriteFile(file, []byte("version: 1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			spec := askSpec(time.Minute)
			spec.Rules = []netpolicy.Rule{first, asks}
			r := newTestRegistry(t, spec, file, 0)
			held := r.ask(t, "api.test", 443, tt.method, tt.path)
			if _, err := r.Answer(r.List()[0].ID, Answer{Allow: tt.allow, Scope: tt.scope, By: ByCLI}); err != nil {
				t.Fatal(err)
			}
			held.Wait(context.Background())
			rules := r.store.Load().Policy().Rules()
			if len(rules) != 3 || rules[0].ID != "first" || rules[2].ID != "q" {
				t.Fatalf("rules: got %+v, want first, the answer's, q", rules)
			}
			got := rules[1]
			got.ID = ""
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("the answer's rule (-want +got):\n%s", diff)
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if wrote := strings.Contains(string(data), "host: api.test"); wrote != (tt.scope == ScopeAlways) || !strings.Contains(string(data), tt.file) {
				t.Errorf("the approvals file after a %s answer: got %q, want the rule written only for always (with %q)", tt.scope, data, tt.file)
			}
		})
	}
}

// Answers that cannot be carried out change nothing: the question stays
// pending and the policy as it was.
func TestAnswerRefused(t *testing.T) {
	r := newTestRegistry(t, askSpec(time.Minute), "", 0)
	held := r.ask(t, "api.test", 443, "GET", "/")
	id := r.List()[0].ID
	if _, err := r.t.claim(id, ByUI); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id   string
		a    Answer
		want error
		text string
	}{
		{id, Answer{Allow: true, Scope: "forever", By: ByCLI}, ErrInvalidAnswer, "answer once, session or always"},
		{id, Answer{Allow: true, Scope: ScopeOnce}, ErrInvalidAnswer, "say who answers (cli, api, ui, tty)"},
		{id, Answer{Allow: true, Scope: ScopeOnce, By: ByTimeout}, ErrInvalidAnswer, "cli, api, ui, tty"},
		{id, Answer{Allow: true, Scope: ScopeOnce, By: "cli\nallowed always by admin"}, ErrInvalidAnswer, "cli, api, ui, tty"},
		{"a999", Answer{Allow: true, Scope: ScopeOnce, By: ByCLI}, ErrNotFound, `"a999": it was answered, timed out, or never asked`},
		{id, Answer{Allow: true, Scope: ScopeAlways, By: ByCLI}, ErrNoFile, "answer with scope session"},
		{id, Answer{Allow: true, Scope: ScopeSession, By: ByCLI}, ErrAnswered, `question "` + id + `" is already answered (by ui)`},
	} {
		_, err := r.Answer(tt.id, tt.a)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("answer %q %+v: got %v, want %v saying %q", tt.id, tt.a, err, tt.want, tt.text)
		}
	}
	if n := len(r.store.Load().Policy().Rules()); n != 0 {
		t.Errorf("rules: got %d, want 0", n)
	}
	r.t.unclaim(id)
	if q := r.List(); len(q) != 1 || q[0].ID != id {
		t.Fatalf("questions: got %+v, want %s still pending", q, id)
	}
	if _, err := r.Answer(id, Answer{Allow: true, Scope: ScopeSession, By: ByTTY}); err != nil {
		t.Fatalf("answering once the claim was given up: %v", err)
	}
	if d, _ := held.Wait(context.Background()); d.Action != netpolicy.Allow {
		t.Errorf("the held request: got %+v, want an allow", d)
	}
	if _, err := r.Answer(id, Answer{Allow: true, Scope: ScopeOnce, By: ByCLI}); !errors.Is(err, ErrNotFound) {
		t.Errorf("answering twice: got %v, want ErrNotFound", err)
	}
}

// Answers racing for one question: one wins, and only its rule is added.
func TestAnswerRaceOneWins(t *testing.T) {
	r := newTestRegistry(t, askSpec(time.Minute), "", 0)
	held := r.ask(t, "api.test", 443, "GET", "/")
	id := r.List()[0].ID
	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = r.Answer(id, Answer{Allow: i%2 == 0, Scope: ScopeSession, By: answerers[i%len(answerers)]})
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrAnswered) && !errors.Is(err, ErrNotFound):
			t.Errorf("a losing answer: got %v, want ErrAnswered or ErrNotFound", err)
		}
	}
	if won != 1 {
		t.Errorf("answers that won: got %d, want 1", won)
	}
	held.Wait(context.Background())
	if n := len(r.store.Load().Policy().Rules()); n != 1 {
		t.Errorf("rules: got %d, want 1 (the winner's)", n)
	}
}

func TestNewNeedsStoreAndGateway(t *testing.T) {
	p, err := netpolicy.Compile(askSpec(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []Config{{Store: netpolicy.NewStore(p)}, {Gateway: &fakeGateway{}}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): got no error, want one", cfg)
		}
	}
}
