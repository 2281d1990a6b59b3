package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
)

// TestMockLLMDefaults: on a mocked host (--mock-llm, and an llm response
// in a policy), what an agent asks besides the model (settings, feature
// flags, telemetry) gets the mock's fixed answer and a record whose reason
// starts with decisionlog.ReasonMockDefault; the models list and
// count_tokens parse in the official SDK; a request for a model at an
// endpoint the mock does not know is still an error whose record says
// unmatched.
func TestMockLLMDefaults(t *testing.T) {
	if want := decisionlog.ReasonMockLLM + mockllm.DefaultOutcome; decisionlog.ReasonMockDefault != want {
		t.Fatalf("got ReasonMockDefault %q, want %q: the gateway's reasons are ReasonMockLLM and the mock's outcome", decisionlog.ReasonMockDefault, want)
	}
	type request struct {
		method, url, body string
		wantStatus        int
		wantBody          string // a substring; "" for any
		wantReason        string // the record's reason, exactly
	}
	const host = "https://api.anthropic.com"
	requests := []request{
		{"GET", host + "/api/claude_cli_feature_flags", "", 404, `"not_found_error"`, decisionlog.ReasonMockDefault + "not a model endpoint: 404"},
		{"GET", host + "/api/oauth/profile?x=1", "", 404, "nothing at GET /api/oauth/profile", decisionlog.ReasonMockDefault + "not a model endpoint: 404"},
		{"POST", host + "/api/event_logging/batch", `{"events":[{"event_type":"x"}]}`, 200, "{}", decisionlog.ReasonMockDefault + "not a model endpoint: 200 {}"},
		{"POST", host + "/v1/complete", `{"model":"claude-2.1","prompt":"hi"}`, 404, "no API at POST /v1/complete",
			decisionlog.ReasonMockUnmatched + "unknown endpoint; request 4 of the mock's journal says more (%s)"},
	}
	for _, viaPolicy := range []bool{false, true} {
		name := "mock-llm"
		if viaPolicy {
			name = "policy"
		}
		t.Run(name, func(t *testing.T) {
			m := newMockSetupAs(t, true, viaPolicy)
			if err := m.anthropic.Expect([]mockllm.Turn{{Match: &mockllm.Match{Model: "claude-sonnet-4-5"}, Reply: &mockllm.Reply{Text: "hi"}}}); err != nil {
				t.Fatal(err)
			}
			c := m.httpClient(t)
			for _, r := range requests {
				req, err := http.NewRequest(r.method, r.url, strings.NewReader(r.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("anthropic-version", "2023-06-01")
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", r.method, r.url, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != r.wantStatus || !strings.Contains(string(b), r.wantBody) {
					t.Errorf("%s %s: got %d %s, want %d and %s", r.method, r.url, resp.StatusCode, b, r.wantStatus, r.wantBody)
				}
			}
			ctx := context.Background()
			ac := m.anthropicClient(t, host)
			page, err := ac.Models.List(ctx, anthropic.ModelListParams{})
			if err != nil || len(page.Data) != 1 || page.Data[0].ID != "claude-sonnet-4-5" {
				t.Errorf("Anthropic Models.List: got %+v (%v), want the script's one model", page, err)
			}
			count, err := ac.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
				Model:    "claude-sonnet-4-5",
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("how many tokens is this?"))},
			})
			if err != nil || count.InputTokens < 1 {
				t.Errorf("Anthropic Messages.CountTokens: got %+v (%v), want a count", count, err)
			}

			type want struct {
				status float64
				reason string // exactly, or its start when it ends with "..."
			}
			var wants []want
			for _, r := range requests {
				wants = append(wants, want{float64(r.wantStatus), strings.ReplaceAll(r.wantReason, "%s", m.journals["api.anthropic.com"])})
			}
			wants = append(wants, want{200, decisionlog.ReasonMockDefault + "the models the script names (1)"},
				want{200, decisionlog.ReasonMockDefault + "count_tokens estimated ..."}) // the count depends on the SDK's body
			recs := recordsOfKind(t, m.g.ring, decisionlog.KindHTTPS)
			if len(recs) != len(wants) {
				t.Fatalf("got %d records, want %d: %v", len(recs), len(wants), recs)
			}
			for i, w := range wants {
				r := recs[i]
				reason, _ := r["reason"].(string)
				fits := reason == w.reason
				if prefix, ok := strings.CutSuffix(w.reason, "..."); ok {
					fits = strings.HasPrefix(reason, prefix)
				}
				if r["host"] != "api.anthropic.com" || r["action"] != "intercept" || r["rule"] != m.rules["api.anthropic.com"] || !fits || r["status"] != w.status {
					t.Errorf("record %d: got %v, want action intercept, rule %s, status %v, reason %q", i, r, m.rules["api.anthropic.com"], w.status, w.reason)
				}
			}
			if j := m.anthropic.Requests(); len(j) != 6 || !j[0].Default || j[3].Default || !j[3].Unmatched {
				t.Errorf("got journal %+v, want 6 requests, the fourth unmatched and the others defaults", j)
			}
		})
	}
}
