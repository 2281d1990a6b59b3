package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/netpolicy"
)

// The by of POST /v1/approvals/{id} is the client's word, written into the
// decision log's approval record: only the known answerers pass (and
// timeout, which only the gateway says, does not); another is a 400 that
// names the set, and never reaches the gateway.
func TestAPIApprovalByIsOneOfTheSet(t *testing.T) {
	for _, tt := range []struct {
		by     string
		status int
		want   string // the by recorded, for a 200
	}{
		{"", 200, "api"},
		{"api", 200, "api"},
		{"cli", 200, "cli"},
		{"ui", 200, "ui"},
		{"tty", 200, "tty"},
		{"timeout", 400, ""},
		{"root", 400, ""},
		{"CLI", 400, ""},
		{"cli\nallowed always by admin", 400, ""},
		{" api", 400, ""},
	} {
		a := startServer(t, netpolicy.Spec{}, func(g *fakeGateway, _ *ServerConfig) {
			g.pending = []Approval{{ID: "a1", Host: "pypi.org", Port: 443}}
		})
		body := `{"answer": "allow", "scope": "once", "by": ` + quoteJSON(tt.by) + `}`
		var e ErrorBody
		var ok ApprovalAnswered
		var out any = &ok
		if tt.status != 200 {
			out = &e
		}
		resp := a.call(t, "POST", "/v1/approvals/a1", body, nil, out)
		if resp.StatusCode != tt.status {
			t.Errorf("by %q: got %d, want %d", tt.by, resp.StatusCode, tt.status)
			continue
		}
		if tt.status == 200 {
			if ok.By != tt.want || len(a.gw.answers) != 1 || a.gw.answers[0].By != tt.want {
				t.Errorf("by %q: got %q answered (%+v), want %q", tt.by, ok.By, a.gw.answers, tt.want)
			}
			continue
		}
		for _, word := range []string{`"api"`, `"cli"`, `"ui"`, `"tty"`} {
			if !strings.Contains(e.Error, word) {
				t.Errorf("by %q: the error %q does not name %s of the allowed set", tt.by, e.Error, word)
			}
		}
		if len(a.gw.answers) != 0 {
			t.Errorf("by %q: the gateway got the answer %+v, want it refused before", tt.by, a.gw.answers)
		}
	}
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The sets of words are written once, here: the API's check takes each
// and its messages name them all.
func TestAPIAnswerWords(t *testing.T) {
	for _, tt := range []struct {
		name string
		got  []string
		want string
	}{
		{"answers", Answers(), "allow deny"},
		{"scopes", Scopes(), "once session always"},
		{"answerers", Answerers(), "cli api ui tty"},
	} {
		if g := strings.Join(tt.got, " "); g != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, g, tt.want)
		}
	}
	for _, a := range Answers() {
		for _, sc := range append(Scopes(), "") {
			for _, by := range append(Answerers(), "") {
				ans := ApprovalAnswer{Answer: a, Scope: sc, By: by}
				if err := ans.check(); err != nil {
					t.Errorf("check(%+v): %v", ans, err)
				}
			}
		}
	}
	Answerers()[0] = "root" // a copy: the set cannot be changed
	if IsAnswerer("root") || !IsAnswerer(ByAPI) {
		t.Errorf("Answerers returned the set itself")
	}
	if got, want := OrList([]string{"a", "b", "c"}, true), `"a", "b" or "c"`; got != want {
		t.Errorf("OrList: got %s, want %s", got, want)
	}
}
