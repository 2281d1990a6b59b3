package ui

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/audit"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/escape"
	"github.com/sbx-dev/sbx/netpolicy"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets/ui.css assets/ui.js
var assets embed.FS

// templates are the pages; each is "layout" around its own "content".
// They are parsed on the first page served, not when sbx starts: most
// runs serve none.
var templates = sync.OnceValue(func() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, page := range []string{"index", "sandbox", "audit", "error"} {
		out[page] = template.Must(template.New("layout.html").Funcs(template.FuncMap{
			"join": strings.Join,
		}).ParseFS(templateFiles, "templates/layout.html", "templates/"+page+".html"))
	}
	return out
})

// pages serves the view's pages, behind Server's checks.
type pages struct {
	sandboxes Sandboxes
	log       *slog.Logger
	csrf      func(session string) string
	now       func() time.Time
	mux       *http.ServeMux
}

// apiWait bounds each call of a page to a sandbox's API.
const apiWait = 10 * time.Second

// shownDecisions is how many of the latest decisions a sandbox's page
// shows.
const shownDecisions = 200

func newPages(sb Sandboxes, log *slog.Logger, csrf func(string) string, now func() time.Time) *pages {
	p := &pages{sandboxes: sb, log: log, csrf: csrf, now: now, mux: http.NewServeMux()}
	p.mux.HandleFunc("GET /{$}", p.index)
	p.mux.HandleFunc("GET /s/{id}", p.sandbox)
	p.mux.HandleFunc("GET /s/{id}/events", p.events)
	p.mux.HandleFunc("GET /s/{id}/audit", p.audit)
	p.mux.HandleFunc("POST /s/{id}/rules", p.addRule)
	p.mux.HandleFunc("POST /s/{id}/rules/{rule}/remove", p.removeRule)
	p.mux.HandleFunc("POST /s/{id}/approvals/{approval}", p.answer)
	p.mux.HandleFunc("GET /static/{file}", p.static)
	p.mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return p
}

// view is what every page's template gets.
type view struct {
	Title string
	CSRF  string
	// Refresh, when set, makes the page reload itself every that many
	// seconds when scripts do not run.
	Refresh int
	Data    any
}

// render writes page with data, or an error page if it cannot.
func (p *pages) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	var buf bytes.Buffer
	v := view{Title: title, CSRF: p.csrf(sessionOf(r.Context())), Data: data}
	if d, ok := data.(*sandboxView); ok && d.Running {
		v.Refresh = 10
	}
	if err := templates()[page].Execute(&buf, v); err != nil {
		p.log.Error("sbx ui: rendering a page", "page", page, "err", err)
		refuse(w, http.StatusInternalServerError, "rendering the page failed")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fail renders the error page: what went wrong and a way back.
func (p *pages) fail(w http.ResponseWriter, r *http.Request, status int, back string, err error) {
	p.render(w, r, status, "error", "error", struct {
		Message string
		Back    string
	}{err.Error(), back})
}

// indexView is the first page: every sandbox.
type indexView struct {
	Running, Ended []sandboxRow
	Error          string
}

type sandboxRow struct {
	Sandbox
	Age string
	// Status is the sandbox's status as its API tells it; "" when it
	// did not answer (Error says why).
	PolicyVersion    uint64
	Allowed, Blocked uint64
	// Pending counts the sandbox's pending approvals.
	Pending int
	Error   string
}

func (p *pages) index(w http.ResponseWriter, r *http.Request) {
	list, err := p.sandboxes.List(r.Context())
	v := &indexView{}
	if err != nil {
		v.Error = err.Error()
	}
	for _, sb := range list {
		row := sandboxRow{Sandbox: sb, Age: time.Since(sb.Time).Round(time.Second).String()}
		if !sb.Running() {
			v.Ended = append(v.Ended, row)
			continue
		}
		v.Running = append(v.Running, row)
	}
	// Each running sandbox's API is asked at once, a few at a time: a
	// cluster sandbox's is a port-forward away, and fifty of them one
	// after another would keep the page for seconds. Each goroutine ends
	// when its sandbox answered or apiWait passed.
	sem := make(chan struct{}, statusAtOnce)
	var wg sync.WaitGroup
	for i := range v.Running {
		row := &v.Running[i]
		if !row.reachable() {
			continue // its API may not answer yet, or cannot
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if st, pending, err := p.status(r.Context(), row.ID); err != nil {
				row.Error = err.Error()
			} else {
				row.PolicyVersion, row.Allowed, row.Blocked = st.PolicyVersion, st.Counts.Allowed, st.Counts.Blocked
				row.Pending = pending
			}
		}()
	}
	wg.Wait()
	p.render(w, r, http.StatusOK, "index", "sandboxes", v)
}

// statusAtOnce bounds how many sandboxes' APIs the first page asks at
// once.
const statusAtOnce = 8

// status asks the running sandbox id for its status and how many
// approvals are pending.
func (p *pages) status(ctx context.Context, id string) (*api.Status, int, error) {
	var st *api.Status
	var pending int
	err := p.withClient(ctx, id, func(ctx context.Context, c *api.Client) error {
		var err error
		if st, err = c.Status(ctx); err != nil {
			return err
		}
		a, err := c.Approvals(ctx)
		if err != nil {
			return err
		}
		pending = len(a.Approvals)
		return nil
	})
	return st, pending, err
}

// find returns the listed sandbox the request's {id} names; nil, after
// answering 404, when none is listed.
func (p *pages) find(w http.ResponseWriter, r *http.Request) *Sandbox {
	id := r.PathValue("id")
	// A listing that failed in part (a cluster that does not answer)
	// still finds the sandboxes it listed.
	list, err := p.sandboxes.List(r.Context())
	i := slices.IndexFunc(list, func(s Sandbox) bool { return s.ID == id })
	if i < 0 && err != nil {
		p.fail(w, r, http.StatusInternalServerError, "/", fmt.Errorf("listing the sandboxes: %w", err))
		return nil
	}
	if i < 0 {
		p.fail(w, r, http.StatusNotFound, "/", fmt.Errorf("no sandbox %q is running or has a log kept", id))
		return nil
	}
	return &list[i]
}

// sandboxView is a sandbox's page.
type sandboxView struct {
	Sandbox
	Running bool
	// Gateway is the running sandbox's status as its API tells it.
	Gateway   *api.Status
	Policy    *api.Policy
	Rules     []ruleRow
	Decisions []decisionRow
	// Approvals are the pending questions, oldest first; ApprovalsRead
	// says the API was asked for them. NewApproval is the row that the
	// script fills for a question that comes while the page is open.
	Approvals     []approvalRow
	ApprovalsRead bool
	NewApproval   approvalRow
	// Since is the seq the live stream starts after.
	Since uint64
	Error string
}

type ruleRow struct {
	netpolicy.Rule
	Ports string
}

func (p *pages) sandbox(w http.ResponseWriter, r *http.Request) {
	sb := p.find(w, r)
	if sb == nil {
		return
	}
	v := &sandboxView{Sandbox: *sb, Running: sb.Running()}
	v.NewApproval = approvalRowOf(api.Approval{}, sb, p.csrf(sessionOf(r.Context())))
	if v.Running {
		if err := p.loadLive(r.Context(), v); err != nil {
			v.Error = err.Error()
		}
	}
	p.render(w, r, http.StatusOK, "sandbox", "sandbox "+sb.ID, v)
}

// loadLive fills v from the sandbox's API: its status, rules, latest
// decisions and pending approvals. The approvals are read after the
// decisions, so that a question asked in between is on the page or in
// the live stream after v.Since (or both: the script skips a question it
// shows already).
func (p *pages) loadLive(ctx context.Context, v *sandboxView) error {
	ctx, cancel := context.WithTimeout(ctx, apiWait)
	defer cancel()
	c, err := p.sandboxes.Client(ctx, v.ID)
	if err != nil {
		return err
	}
	defer c.Close()
	if v.Gateway, err = c.Status(ctx); err != nil {
		return err
	}
	if v.Policy, err = c.Policy(ctx); err != nil {
		return err
	}
	for _, rule := range v.Policy.Policy.Rules {
		var ports []string
		for _, port := range rule.Ports {
			ports = append(ports, port.String())
		}
		v.Rules = append(v.Rules, ruleRow{Rule: rule, Ports: strings.Join(ports, ",")})
	}
	// The ring's pages, oldest first, keeping the latest.
	for {
		page, err := c.Decisions(ctx, v.Since, 0)
		if err != nil {
			return err
		}
		for _, raw := range page.Decisions {
			if row, ok := decisionOf(raw); ok {
				v.Decisions = append(v.Decisions, row)
			}
		}
		if len(v.Decisions) > shownDecisions {
			v.Decisions = slices.Delete(v.Decisions, 0, len(v.Decisions)-shownDecisions)
		}
		if page.Next <= v.Since || len(page.Decisions) == 0 {
			break
		}
		v.Since = page.Next
	}
	slices.Reverse(v.Decisions) // newest first
	pending, err := c.Approvals(ctx)
	if err != nil {
		return err
	}
	for _, a := range pending.Approvals {
		v.Approvals = append(v.Approvals, approvalRowOf(a, &v.Sandbox, v.NewApproval.CSRF))
	}
	v.ApprovalsRead = true
	return nil
}

// approvalRow is a pending question as the page and the live stream show
// it, with the forms that answer it.
type approvalRow struct {
	ID string `json:"id"`
	// Target is host:port, what every held request waits on.
	Target string `json:"target"`
	// Kind, Request (method and path) and Client are the question's:
	// every request held on it has that method and path, and Request
	// ends with "(N requests)" when N > 1 are held.
	Kind    string `json:"kind"`
	Request string `json:"request"`
	Client  string `json:"client"`
	// Why is the rule that asked and its reason.
	Why string `json:"why"`
	// Asked is when it was asked; Left the time left before the
	// question times out (its requests are then blocked), as the page
	// was made; Deadline that time, in Unix milliseconds, which the
	// script counts down to.
	Asked    string `json:"asked"`
	Left     string `json:"left"`
	Deadline int64  `json:"deadline"`
	Waiting  int    `json:"waiting"`
	// Action is the answer forms' address and CSRF their token; the
	// page has them, the stream does not. NoAlways leaves the always
	// answers out (Sandbox.NoAlways).
	Action   string `json:"-"`
	CSRF     string `json:"-"`
	NoAlways bool   `json:"-"`
}

// approvalRowOf is the row of pending question a of sandbox sb, whose
// forms carry csrf. The zero a makes the row the script fills.
func approvalRowOf(a api.Approval, sb *Sandbox, csrf string) approvalRow {
	row := approvalRow{
		ID: a.ID, Kind: a.Kind, Request: strings.TrimSpace(a.Method + " " + a.Path), Client: a.Client,
		Waiting: a.Waiting, Action: "/s/" + url.PathEscape(sb.ID) + "/approvals/" + url.PathEscape(a.ID), CSRF: csrf,
		NoAlways: sb.NoAlways,
	}
	if a.ID == "" {
		return row
	}
	if a.Waiting > 1 { // each with the question's method and path; an answer reaches them all
		row.Request += fmt.Sprintf(" (%d requests)", a.Waiting)
	}
	row.Target = net.JoinHostPort(a.Host, strconv.Itoa(int(a.Port)))
	row.Why = a.Rule
	if a.Reason != "" {
		row.Why += ": " + a.Reason
	}
	// As decisionRowOf: the sandbox's text shows as it is.
	row.Target, row.Request, row.Client, row.Why = escape.Text(row.Target), escape.Text(row.Request), escape.Text(row.Client), escape.Text(row.Why)
	row.Asked = a.Asked.Local().Format("15:04:05")
	row.Left = timeLeft(time.Until(a.Deadline))
	row.Deadline = a.Deadline.UnixMilli()
	return row
}

// timeLeft writes d in whole seconds, as "42s" or "1m30s"; none left is
// "0s". The script writes it the same way.
func timeLeft(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return ((d + time.Second - 1) / time.Second * time.Second).String()
}

// decisionRow is a decision as the page and the live stream show it.
type decisionRow struct {
	Seq    uint64 `json:"seq"`
	Time   string `json:"time"`
	Action string `json:"action"`
	// Class is the row's style: allow, block, intercept or other.
	Class  string `json:"class"`
	Kind   string `json:"kind"`
	Method string `json:"method"`
	Target string `json:"target"`
	Path   string `json:"path"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// decisionOf is the row of a decision record; false for other records.
func decisionOf(raw []byte) (decisionRow, bool) {
	var rec decisionlog.Record
	if err := decisionlog.Decode(raw, &rec); err != nil || rec.Event != decisionlog.EventDecision {
		return decisionRow{}, false
	}
	return decisionRowOf(&rec), true
}

// decisionRowOf is the row of decision record rec.
func decisionRowOf(rec *decisionlog.Record) decisionRow {
	target := rec.Host
	if rec.Port != 0 {
		target += ":" + strconv.Itoa(rec.Port)
	}
	action := rec.Action
	if !rec.Enforced && rec.Action == string(netpolicy.Block) {
		action += " (not enforced)"
	}
	class := "other"
	if slices.Contains([]string{"allow", "block", "intercept"}, rec.Action) {
		class = rec.Action
	}
	// What the sandbox controls shows as it is: html/template escapes
	// markup, escape.Text the controls and bidi overrides that would
	// reorder or hide it on the page.
	return decisionRow{
		Seq: rec.Seq, Time: rec.Time.Local().Format("15:04:05"), Action: action, Class: class, Kind: escape.Text(rec.Kind),
		Method: escape.Text(rec.Method), Target: escape.Text(target), Path: escape.Text(rec.Path), Rule: escape.Text(rec.Rule), Reason: escape.Text(rec.Reason),
	}
}

// answeredEvent is the data of the event stream's "answered" event: a
// question that is no longer pending, and its answer.
type answeredEvent struct {
	ID     string `json:"id"`
	Answer string `json:"answer"`
	Scope  string `json:"scope"`
	By     string `json:"by"`
}

// events streams the sandbox's new decisions as server-sent events
// (event "decision", its data a decisionRow in JSON, its id the seq),
// from the API's follow stream, after the seq of since= or of the
// browser's Last-Event-ID. The stream's approval records become event
// "approval" for a new question (an approvalRow, read from GET
// /v1/approvals, which has its deadline; none when it is no longer
// pending) and "answered" for its answer (an answeredEvent), so that
// the page shows the pending questions as they come and go. It ends
// with event "end" when the gateway ends the stream; when the request
// ends, so does it.
func (p *pages) events(w http.ResponseWriter, r *http.Request) {
	sb := p.find(w, r)
	if sb == nil {
		return
	}
	since, _ := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
	if last, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil {
		since = last
	}
	ctx := r.Context()
	c, err := p.sandboxes.Client(ctx, sb.ID)
	if err != nil {
		refuse(w, http.StatusBadGateway, err.Error())
		return
	}
	defer c.Close()
	stream, err := c.FollowDecisions(ctx, since)
	if err != nil {
		refuse(w, http.StatusBadGateway, err.Error())
		return
	}
	defer stream.Close()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	rc.Flush()
	csrf := p.csrf(sessionOf(ctx))
	pending := map[string]api.Approval{} // as GET /v1/approvals last said
	for {
		raw, err := stream.Next()
		if errors.Is(err, io.EOF) {
			io.WriteString(w, "event: end\ndata: the gateway stopped\n\n")
			rc.Flush()
			return
		} else if err != nil {
			return // ctx done, or the stream fell behind: the browser reconnects
		}
		var rec decisionlog.Record
		if decisionlog.Decode(raw, &rec) != nil {
			continue
		}
		var event string
		var data any
		switch {
		case rec.Event == decisionlog.EventDecision:
			event, data = "decision", decisionRowOf(&rec)
		case rec.Event == decisionlog.EventApproval && rec.Answer == "":
			a, ok := pending[rec.ApprovalID]
			if !ok {
				list, err := c.Approvals(ctx)
				if err != nil {
					return // the browser reconnects
				}
				clear(pending)
				for _, a := range list.Approvals {
					pending[a.ID] = a
				}
				if a, ok = pending[rec.ApprovalID]; !ok {
					continue // answered or timed out already: its answer follows
				}
			}
			event, data = "approval", approvalRowOf(a, sb, csrf)
		case rec.Event == decisionlog.EventApproval:
			delete(pending, rec.ApprovalID)
			event, data = "answered", answeredEvent{ID: rec.ApprovalID, Answer: rec.Answer, Scope: rec.Scope, By: rec.By}
		default:
			continue
		}
		js, _ := json.Marshal(data) // escapes <, > and & too
		if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", rec.Seq, event, js); err != nil {
			return
		}
		rc.Flush()
	}
}

// auditView is a sandbox's audit page.
type auditView struct {
	Sandbox
	Report string
}

// audit renders the report of the sandbox's decision log, as sbx audit
// --sandbox ID does.
func (p *pages) audit(w http.ResponseWriter, r *http.Request) {
	sb := p.find(w, r)
	if sb == nil {
		return
	}
	back := "/s/" + url.PathEscape(sb.ID)
	if !sb.HasLog {
		p.fail(w, r, http.StatusNotFound, back, fmt.Errorf("sandbox %s has no decision log kept", sb.ID))
		return
	}
	src := audit.Source{Name: "sandbox " + sb.ID, Open: func() (io.ReadCloser, error) { return p.sandboxes.OpenLog(r.Context(), sb.ID) }}
	sum, err := audit.Summarize(r.Context(), []audit.Source{src}, audit.Limits{})
	if err != nil {
		p.fail(w, r, http.StatusInternalServerError, back, fmt.Errorf("reading the decision log: %w", err))
		return
	}
	var text bytes.Buffer
	if err := audit.WriteReport(&text, sum.Report(), audit.FormatText); err != nil {
		p.fail(w, r, http.StatusInternalServerError, back, err)
		return
	}
	p.render(w, r, http.StatusOK, "audit", "audit of "+sb.ID, &auditView{Sandbox: *sb, Report: text.String()})
}

// ErrBadRule is the error of a rule form that does not make a rule.
var ErrBadRule = errors.New("invalid rule")

// ruleOf is the rule the add form asks for, as sbx policy allow and
// block make it.
func ruleOf(r *http.Request) (api.AddRule, error) {
	action := netpolicy.Action(r.PostFormValue("action"))
	if action != netpolicy.Allow && action != netpolicy.Block {
		return api.AddRule{}, fmt.Errorf("%w: action %q: want allow or block", ErrBadRule, action)
	}
	pattern := strings.TrimSpace(r.PostFormValue("pattern"))
	host, ports, err := netpolicy.ParseFlagPattern(pattern)
	if err != nil {
		return api.AddRule{}, fmt.Errorf("%w: %w", ErrBadRule, err)
	}
	if action == netpolicy.Allow {
		if _, err := netpolicy.FlagRules(nil, nil, []string{pattern}); err != nil {
			return api.AddRule{}, fmt.Errorf("%w: %w", ErrBadRule, err)
		}
	}
	req := api.AddRule{Rule: netpolicy.Rule{ID: strings.TrimSpace(r.PostFormValue("id")), Host: host, Ports: ports, Action: action}}
	if pos := strings.TrimSpace(r.PostFormValue("position")); pos != "" {
		n, err := strconv.Atoi(pos)
		if err != nil || n < 0 {
			return api.AddRule{}, fmt.Errorf("%w: position %q: want 0 (first) or more, or nothing for last", ErrBadRule, pos)
		}
		req.Position = &n
	}
	return req, nil
}

// addRule adds a rule through the API (POST /v1/policy/rules), as sbx
// policy allow and block do, and goes back to the sandbox's page.
func (p *pages) addRule(w http.ResponseWriter, r *http.Request) {
	sb := p.find(w, r)
	if sb == nil {
		return
	}
	back := "/s/" + url.PathEscape(sb.ID)
	req, err := ruleOf(r)
	if err != nil {
		p.fail(w, r, http.StatusBadRequest, back, err)
		return
	}
	err = p.withClient(r.Context(), sb.ID, func(ctx context.Context, c *api.Client) error {
		_, err := c.AddRule(ctx, req, 0)
		return err
	})
	if err != nil {
		p.fail(w, r, apiStatus(err), back, fmt.Errorf("adding the rule: %w", err))
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// removeRule removes a rule through the API (DELETE
// /v1/policy/rules/{id}), as sbx policy remove does.
func (p *pages) removeRule(w http.ResponseWriter, r *http.Request) {
	sb := p.find(w, r)
	if sb == nil {
		return
	}
	back := "/s/" + url.PathEscape(sb.ID)
	rule := r.PathValue("rule")
	err := p.withClient(r.Context(), sb.ID, func(ctx context.Context, c *api.Client) error {
		_, err := c.RemoveRule(ctx, rule, 0)
		return err
	})
	if err != nil {
		p.fail(w, r, apiStatus(err), back, fmt.Errorf("removing rule %s: %w", rule, err))
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// ErrBadAnswer is the error of an answer form that does not make an
// answer.
var ErrBadAnswer = errors.New("invalid answer")

// answerOf is the answer the form asks for, from sbx ui.
func answerOf(r *http.Request) (api.ApprovalAnswer, error) {
	a := api.ApprovalAnswer{Answer: r.PostFormValue("answer"), Scope: r.PostFormValue("scope"), By: api.ByUI}
	if !api.IsAnswer(a.Answer) {
		return api.ApprovalAnswer{}, fmt.Errorf("%w: answer %q: want %s", ErrBadAnswer, a.Answer, api.OrList(api.Answers(), false))
	}
	if !api.IsScope(a.Scope) {
		return api.ApprovalAnswer{}, fmt.Errorf("%w: scope %q: want %s", ErrBadAnswer, a.Scope, api.OrList(api.Scopes(), false))
	}
	return a, nil
}

// ErrGone is the error of an answer to a question that is no longer
// pending.
var ErrGone = errors.New("no longer pending")

// answer answers a pending question through the API (POST
// /v1/approvals/{id}, by ui), as sbx approve and deny do, and goes back
// to the sandbox's page. The form's address names the question; an
// answer to a question that is no longer pending (answered or timed out
// meanwhile), or that was asked less than AnswerDelay ago, is refused
// with 409 and given to no other. The API's other refusals are shown
// with their status: 409 for an always answer when the sandbox has no
// file to write its rule to.
func (p *pages) answer(w http.ResponseWriter, r *http.Request) {
	sb := p.find(w, r)
	if sb == nil {
		return
	}
	back := "/s/" + url.PathEscape(sb.ID)
	ans, err := answerOf(r)
	if err != nil {
		p.fail(w, r, http.StatusBadRequest, back, err)
		return
	}
	id := r.PathValue("approval")
	err = p.withClient(r.Context(), sb.ID, func(ctx context.Context, c *api.Client) error {
		list, err := c.Approvals(ctx)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(list.Approvals, func(a api.Approval) bool { return a.ID == id })
		if i < 0 {
			return fmt.Errorf("question %s is %w: it was answered or timed out, and the answer was given to no other question", id, ErrGone)
		}
		if age := p.now().Sub(list.Approvals[i].Asked); age < AnswerDelay {
			return fmt.Errorf("%w: question %s was asked %s ago; answers are taken once a question has been on screen for %s, so that a click meant for another one does not answer it: look at it and answer again",
				errTooNew, id, age.Round(time.Millisecond), AnswerDelay)
		}
		_, err = c.AnswerApproval(ctx, id, ans)
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			return fmt.Errorf("question %s is %w: it was answered or timed out, and the answer was given to no other question", id, ErrGone)
		}
		return err
	})
	if errors.Is(err, ErrGone) || errors.Is(err, errTooNew) {
		p.fail(w, r, http.StatusConflict, back, fmt.Errorf("not answered (%s %s): %w", ans.Answer, ans.Scope, err))
		return
	}
	if err != nil {
		p.fail(w, r, apiStatus(err), back, fmt.Errorf("answering question %s (%s %s): %w", id, ans.Answer, ans.Scope, err))
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// errTooNew is the error of an answer to a question asked less than
// AnswerDelay ago.
var errTooNew = errors.New("too soon")

// withClient calls fn with a client of sandbox id, within apiWait.
func (p *pages) withClient(ctx context.Context, id string, fn func(context.Context, *api.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, apiWait)
	defer cancel()
	c, err := p.sandboxes.Client(ctx, id)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// apiStatus is the status to answer an API call's failure with: the
// API's own for what it refused (400, 404, 409, 412), else 502.
func apiStatus(err error) int {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 {
		return ae.Status
	}
	return http.StatusBadGateway
}

// static serves the style sheet and the script.
func (p *pages) static(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	types := map[string]string{"ui.css": "text/css; charset=utf-8", "ui.js": "text/javascript; charset=utf-8"}
	ct, ok := types[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	data, err := assets.ReadFile("assets/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Write(data)
}
