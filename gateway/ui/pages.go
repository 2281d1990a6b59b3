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
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/audit"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets/ui.css assets/ui.js
var assets embed.FS

// templates are the pages; each is "layout" around its own "content".
var templates = func() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, page := range []string{"index", "sandbox", "audit", "error"} {
		out[page] = template.Must(template.New("layout.html").Funcs(template.FuncMap{
			"join": strings.Join,
		}).ParseFS(templateFiles, "templates/layout.html", "templates/"+page+".html"))
	}
	return out
}()

// pages serves the view's pages, behind Server's checks.
type pages struct {
	sandboxes Sandboxes
	log       *slog.Logger
	csrf      func(session string) string
	mux       *http.ServeMux
}

// apiWait bounds each call of a page to a sandbox's API.
const apiWait = 10 * time.Second

// shownDecisions is how many of the latest decisions a sandbox's page
// shows.
const shownDecisions = 200

func newPages(sb Sandboxes, log *slog.Logger, csrf func(string) string) *pages {
	p := &pages{sandboxes: sb, log: log, csrf: csrf, mux: http.NewServeMux()}
	p.mux.HandleFunc("GET /{$}", p.index)
	p.mux.HandleFunc("GET /s/{id}", p.sandbox)
	p.mux.HandleFunc("GET /s/{id}/events", p.events)
	p.mux.HandleFunc("GET /s/{id}/audit", p.audit)
	p.mux.HandleFunc("POST /s/{id}/rules", p.addRule)
	p.mux.HandleFunc("POST /s/{id}/rules/{rule}/remove", p.removeRule)
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
	if err := templates[page].Execute(&buf, v); err != nil {
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
	Error            string
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
		if sb.Status == "starting" {
			// Its API may not answer yet; sbx ps does not ask either.
		} else if st, err := p.status(r.Context(), sb.ID); err != nil {
			row.Error = err.Error()
		} else {
			row.PolicyVersion, row.Allowed, row.Blocked = st.PolicyVersion, st.Counts.Allowed, st.Counts.Blocked
		}
		v.Running = append(v.Running, row)
	}
	p.render(w, r, http.StatusOK, "index", "sandboxes", v)
}

// status asks the running sandbox id for its status.
func (p *pages) status(ctx context.Context, id string) (*api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, apiWait)
	defer cancel()
	c, err := p.sandboxes.Client(ctx, id)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Status(ctx)
}

// find returns the listed sandbox the request's {id} names; nil, after
// answering 404, when none is listed.
func (p *pages) find(w http.ResponseWriter, r *http.Request) *Sandbox {
	id := r.PathValue("id")
	list, err := p.sandboxes.List(r.Context())
	if err != nil {
		p.fail(w, r, http.StatusInternalServerError, "/", fmt.Errorf("listing the sandboxes: %w", err))
		return nil
	}
	i := slices.IndexFunc(list, func(s Sandbox) bool { return s.ID == id })
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
	if v.Running {
		if err := p.loadLive(r.Context(), v); err != nil {
			v.Error = err.Error()
		}
	}
	p.render(w, r, http.StatusOK, "sandbox", "sandbox "+sb.ID, v)
}

// loadLive fills v from the sandbox's API: its status, rules and latest
// decisions.
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
	return nil
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
	return decisionRow{
		Seq: rec.Seq, Time: rec.Time.Local().Format("15:04:05"), Action: action, Class: class, Kind: rec.Kind,
		Method: rec.Method, Target: target, Path: rec.Path, Rule: rec.Rule, Reason: rec.Reason,
	}, true
}

// events streams the sandbox's new decisions as server-sent events
// (event "decision", its data a decisionRow in JSON, its id the seq),
// from the API's follow stream, after the seq of since= or of the
// browser's Last-Event-ID. It ends with event "end" when the gateway
// ends the stream; when the request ends, so does it.
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
	for {
		raw, err := stream.Next()
		if errors.Is(err, io.EOF) {
			io.WriteString(w, "event: end\ndata: the gateway stopped\n\n")
			rc.Flush()
			return
		} else if err != nil {
			return // ctx done, or the stream fell behind: the browser reconnects
		}
		row, ok := decisionOf(raw)
		if !ok {
			continue
		}
		data, _ := json.Marshal(row) // escapes <, > and & too
		if _, err := fmt.Fprintf(w, "id: %d\nevent: decision\ndata: %s\n\n", row.Seq, data); err != nil {
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
// API's own for what it refused (400, 404, 412), else 502.
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
