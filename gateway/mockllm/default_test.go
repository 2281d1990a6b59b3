package mockllm

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestDefaults: a request that is not for a model gets the fixed answer
// of its method (a read 404 in the API's error shape, anything else 200
// {}), GET /v1/models lists the script's models, count_tokens gets an
// estimate; each is journaled as a default, unmatched never, and
// OnUnmatched does not hear of it.
func TestDefaults(t *testing.T) {
	const script = `turns:
  - match: {model: claude-sonnet-4-5}
    reply: {text: hi}
  - match: {model: claude-haiku-4-5}
    reply: {text: hi}
  - match: {model: claude-sonnet-4-5, user: again}
    reply: {text: hi}
  - reply: {text: any model}
`
	anthropicVersion := []string{"anthropic-version", "2023-06-01"}
	countBody := userBody(Anthropic, "claude-sonnet-4-5", "how long is this?", false)
	tests := []struct {
		name         string
		script       string
		method, path string
		body         string
		header       []string
		wantStatus   int
		wantBody     string // exact; "" for none
		wantOutcome  string
		wantDialect  Dialect
		wantModel    string
	}{
		{
			name: "a read, Anthropic client", method: "GET", path: "/api/oauth/profile", header: anthropicVersion,
			wantStatus:  404,
			wantBody:    `{"type":"error","error":{"type":"not_found_error","message":"sbx mock LLM: nothing at GET /api/oauth/profile: the mock answers model requests, and a read of any other path is not found"}}`,
			wantOutcome: "default: not a model endpoint: 404",
		},
		{
			name: "a read, OpenAI client", method: "GET", path: "/backend-api/codex/settings",
			wantStatus:  404,
			wantBody:    `{"error":{"message":"sbx mock LLM: nothing at GET /backend-api/codex/settings: the mock answers model requests, and a read of any other path is not found","type":"invalid_request_error","param":null,"code":"not_found"}}`,
			wantOutcome: "default: not a model endpoint: 404",
		},
		{
			name: "HEAD", method: "HEAD", path: "/",
			wantStatus: 404, wantOutcome: "default: not a model endpoint: 404",
		},
		{
			name: "telemetry", method: "POST", path: "/api/event_logging/batch", header: anthropicVersion,
			body:       `{"events":[{"event_type":"ClaudeCodeInternalEvent","event_data":{"model":"claude-sonnet-4-5"}}]}`,
			wantStatus: 200, wantBody: `{}`, wantOutcome: "default: not a model endpoint: 200 {}",
		},
		{
			name: "a POST without a body", method: "POST", path: "/api/claude_code/metrics",
			wantStatus: 200, wantBody: `{}`, wantOutcome: "default: not a model endpoint: 200 {}",
		},
		{
			name: "a model that is not a string", method: "POST", path: "/v1/traces", body: `{"model":{"id":3}}`,
			wantStatus: 200, wantBody: `{}`, wantOutcome: "default: not a model endpoint: 200 {}",
		},
		{
			name: "PUT", method: "PUT", path: "/api/settings", body: `{"theme":"dark"}`,
			wantStatus: 200, wantBody: `{}`, wantOutcome: "default: not a model endpoint: 200 {}",
		},
		{
			name: "models, Anthropic client", script: script, method: "GET", path: "/v1/models", header: anthropicVersion,
			wantStatus: 200,
			wantBody: `{"data":[{"type":"model","id":"claude-sonnet-4-5","display_name":"claude-sonnet-4-5","created_at":"2025-01-01T00:00:00Z"},` +
				`{"type":"model","id":"claude-haiku-4-5","display_name":"claude-haiku-4-5","created_at":"2025-01-01T00:00:00Z"}],` +
				`"has_more":false,"first_id":"claude-sonnet-4-5","last_id":"claude-haiku-4-5"}`,
			wantOutcome: "default: the models the script names (2)",
		},
		{
			name: "models, OpenAI client", script: script, method: "GET", path: "/v1/models",
			wantStatus: 200,
			wantBody: `{"object":"list","data":[{"id":"claude-sonnet-4-5","object":"model","created":1735689600,"owned_by":"sbx-mock"},` +
				`{"id":"claude-haiku-4-5","object":"model","created":1735689600,"owned_by":"sbx-mock"}]}`,
			wantOutcome: "default: the models the script names (2)",
		},
		{
			name: "models, none named", method: "GET", path: "/v1/models", header: anthropicVersion,
			wantStatus: 200, wantBody: `{"data":[],"has_more":false,"first_id":null,"last_id":null}`,
			wantOutcome: "default: the models the script names (0)",
		},
		{
			name: "count_tokens", method: "POST", path: "/v1/messages/count_tokens", body: countBody, header: anthropicVersion,
			wantStatus: 200, wantBody: `{"input_tokens":` + strconv.Itoa((len(countBody)+3)/4) + `}`,
			wantOutcome: "default: count_tokens estimated " + strconv.Itoa((len(countBody)+3)/4) + " input tokens",
			wantDialect: Anthropic, wantModel: "claude-sonnet-4-5",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, srv := serve(t, tt.script)
			var heard []Journaled
			r.OnUnmatched = func(j Journaled) { heard = append(heard, j) }
			resp, body, err := post(t, srv, tt.method, tt.path, tt.body, tt.header...)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("got status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if tt.wantBody != "" && body != tt.wantBody {
				t.Errorf("got body\n%s\nwant\n%s", body, tt.wantBody)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("got Content-Type %q, want application/json", ct)
			}
			journal := r.Requests()
			if len(journal) != 1 {
				t.Fatalf("got %d journal entries, want 1", len(journal))
			}
			j := journal[0]
			if j.Outcome != tt.wantOutcome || !j.Default || j.Unmatched || j.Turn != 0 || j.Status != tt.wantStatus ||
				j.Dialect != tt.wantDialect || j.Model != tt.wantModel || j.Method != tt.method || j.Path != tt.path {
				t.Errorf("got journal entry %+v, want outcome %q, default, not unmatched, status %d, dialect %q, model %q",
					j, tt.wantOutcome, tt.wantStatus, tt.wantDialect, tt.wantModel)
			}
			if !strings.HasPrefix(j.Outcome, DefaultOutcome) {
				t.Errorf("got outcome %q, want it to start with %q", j.Outcome, DefaultOutcome)
			}
			if tt.body != "" && json.Valid([]byte(tt.body)) && string(j.Body) != tt.body {
				t.Errorf("got journaled body %s, want %s", j.Body, tt.body)
			}
			if len(heard) != 0 {
				t.Errorf("OnUnmatched heard %+v, want nothing", heard)
			}
		})
	}
}

// TestDefaultsLeaveTheScript: a fixed answer takes no turn: the request
// after it gets the script's first.
func TestDefaultsLeaveTheScript(t *testing.T) {
	r, srv := serve(t, "turns:\n  - reply: {text: the first turn}\n")
	for _, p := range []string{"/v1/models", "/api/claude_cli_feature_flags"} {
		if _, _, err := post(t, srv, "GET", p, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := post(t, srv, "POST", "/api/event_logging/batch", `{"events":[]}`); err != nil {
		t.Fatal(err)
	}
	resp, body, err := post(t, srv, "POST", "/v1/messages", userBody(Anthropic, "m", "hi", false), "anthropic-version", "2023-06-01")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || replyText(t, Anthropic, body) != "the first turn" {
		t.Errorf("got %d %s, want 200 and the script's first turn", resp.StatusCode, body)
	}
	if j := r.Requests(); len(j) != 4 || j[3].Turn != 1 {
		t.Errorf("got journal %+v, want 4 entries, the last answered by turn 1", j)
	}
}
