package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// askMock sends m an Anthropic request for user, as the gateway passes
// one on, and returns the status and body.
func askMock(t *testing.T, m *mockllm.Responder, user string) (int, string) {
	t.Helper()
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"` + user + `"}]}`
	req := httptest.NewRequest("POST", "http://api.anthropic.com/v1/messages", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestAPIMock(t *testing.T) {
	mock := mockllm.New(nil)
	a := startServer(t, netpolicy.Spec{Default: netpolicy.Block}, func(g *fakeGateway, _ *ServerConfig) {
		g.hosts = map[string]*mockllm.Responder{"api.anthropic.com": mock}
	})
	// Nothing is scripted: unmatched.
	if status, _ := askMock(t, mock, "hello"); status != http.StatusBadRequest {
		t.Errorf("before expect: got %d, want 400", status)
	}
	var queued struct {
		Host   string `json:"host"`
		Queued int    `json:"queued"`
	}
	resp := a.call(t, "POST", "/v1/mock/expect", "- match: {user: hello}\n  reply: {text: queued answer}\n- reply: {text: second}\n", nil, &queued)
	if resp.StatusCode != http.StatusOK || queued.Host != "api.anthropic.com" || queued.Queued != 2 {
		t.Fatalf("POST /v1/mock/expect: got %d %+v, want 200 and 2 turns queued for api.anthropic.com", resp.StatusCode, queued)
	}
	if status, body := askMock(t, mock, "hello"); status != http.StatusOK || !strings.Contains(body, "queued answer") {
		t.Errorf("after expect: got %d %s, want the queued answer", status, body)
	}
	var journal struct {
		Host     string `json:"host"`
		Requests []struct {
			Seq       int             `json:"seq"`
			Turn      int             `json:"turn"`
			Unmatched bool            `json:"unmatched"`
			Body      json.RawMessage `json:"body"`
		} `json:"requests"`
	}
	resp = a.call(t, "GET", "/v1/mock/requests?host=API.Anthropic.com", "", nil, &journal)
	if resp.StatusCode != http.StatusOK || len(journal.Requests) != 2 || !journal.Requests[0].Unmatched || journal.Requests[1].Turn != 1 ||
		!strings.Contains(string(journal.Requests[1].Body), `"hello"`) {
		t.Errorf("GET /v1/mock/requests: got %d %+v, want an unmatched request then turn 1, with bodies", resp.StatusCode, journal)
	}
	var errBody struct {
		Error string `json:"error"`
	}
	resp = a.call(t, "POST", "/v1/mock/expect", "- reply: {txet: x}\n", nil, &errBody)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(errBody.Error, "body:1:") {
		t.Errorf("bad turns: got %d %q, want 400 naming body:1", resp.StatusCode, errBody.Error)
	}
	resp = a.call(t, "POST", "/v1/mock/expect?name=turns.yaml", "- reply: {text: x}\n- reply: {txet: x}\n", nil, &errBody)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(errBody.Error, "turns.yaml:2:") {
		t.Errorf("bad turns, named: got %d %q, want 400 naming turns.yaml:2", resp.StatusCode, errBody.Error)
	}
	resp = a.call(t, "POST", "/v1/mock/expect?host=other.example", "- reply: {text: x}\n", nil, &errBody)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(errBody.Error, "other.example is not mocked") {
		t.Errorf("unmocked host: got %d %q, want 404", resp.StatusCode, errBody.Error)
	}
	var reset struct {
		Reset []string `json:"reset"`
	}
	if resp := a.call(t, "DELETE", "/v1/mock", "", nil, &reset); resp.StatusCode != http.StatusOK || len(reset.Reset) != 1 {
		t.Errorf("DELETE /v1/mock: got %d %+v", resp.StatusCode, reset)
	}
	a.call(t, "GET", "/v1/mock/requests", "", nil, &journal)
	if len(journal.Requests) != 0 {
		t.Errorf("after reset: got %d requests, want none", len(journal.Requests))
	}
	// The second queued turn went with the reset.
	if status, _ := askMock(t, mock, "anything"); status != http.StatusBadRequest {
		t.Errorf("after reset: got %d, want 400", status)
	}
	req, _ := http.NewRequest("GET", a.base+"/v1/mock/requests", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a token: got %v %v, want 401", resp, err)
	}
}

func TestAPIMockHosts(t *testing.T) {
	none := startServer(t, netpolicy.Spec{}, nil)
	var errBody struct {
		Error string `json:"error"`
	}
	for _, c := range []struct{ method, path string }{{"POST", "/v1/mock/expect"}, {"GET", "/v1/mock/requests"}, {"DELETE", "/v1/mock"}} {
		resp := none.call(t, c.method, c.path, "- reply: {text: x}\n", nil, &errBody)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(errBody.Error, "--mock-llm") {
			t.Errorf("%s %s with no mock: got %d %q, want 404 naming --mock-llm", c.method, c.path, resp.StatusCode, errBody.Error)
		}
	}
	two := startServer(t, netpolicy.Spec{}, func(g *fakeGateway, _ *ServerConfig) {
		g.hosts = map[string]*mockllm.Responder{"a.example": mockllm.New(nil), "b.example": mockllm.New(nil)}
	})
	resp := two.call(t, "GET", "/v1/mock/requests", "", nil, &errBody)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(errBody.Error, "a.example, b.example") {
		t.Errorf("two hosts, none named: got %d %q, want 400 listing them", resp.StatusCode, errBody.Error)
	}
	var reset struct {
		Reset []string `json:"reset"`
	}
	if resp := two.call(t, "DELETE", "/v1/mock", "", nil, &reset); resp.StatusCode != http.StatusOK || len(reset.Reset) != 2 {
		t.Errorf("DELETE /v1/mock with two hosts: got %d %+v, want both reset", resp.StatusCode, reset)
	}
}

// TestJournaledWire: a mock's journal entry encodes as api.MockRequest
// as it does as mockllm.Journaled, every field set, so that a field the
// journal gains and the API does not carry is noticed.
func TestJournaledWire(t *testing.T) {
	j := mockllm.Journaled{
		Seq: 3, Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Method: "POST", Path: "/v1/messages",
		Dialect: mockllm.Anthropic, WebSocket: true, Model: "m", Stream: true, Body: json.RawMessage(`{"a":1}`), BodyTruncated: true,
		Turn: 2, Unmatched: true, Default: true, Status: 429, Outcome: "turn 2: fault 429",
	}
	// Every field must be set, or a new one would pass unnoticed.
	rv := reflect.ValueOf(j)
	for i := range rv.NumField() {
		if rv.Field(i).IsZero() {
			t.Fatalf("mockllm.Journaled.%s is not set in this test; set it, and carry it in api.MockRequest", rv.Type().Field(i).Name)
		}
	}
	want, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(Journaled(j))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("api.MockRequest encodes as\n%s\nwant, as mockllm.Journaled,\n%s", got, want)
	}
}

// TestAPIMockRecording: GET /v1/mock/recording answers what a recorder
// has recorded so far as the script --mock-llm replays, which answers the
// same request with the same text; a gateway that records nothing, or
// not that host, says so.
func TestAPIMockRecording(t *testing.T) {
	upstream := mockllm.New(mustScript(t, "turns:\n  - reply: {text: from the real api}\n"))
	rec := mockllm.NewRecorder(roundTripper(func(r *http.Request) (*http.Response, error) {
		w := httptest.NewRecorder()
		upstream.ServeHTTP(w, r)
		return w.Result(), nil
	}))
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"the word is quince"}]}`
	req := httptest.NewRequest("POST", "https://api.anthropic.com/v1/messages", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := rec.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	a := startServer(t, netpolicy.Spec{}, func(g *fakeGateway, _ *ServerConfig) {
		g.recorders = map[string]*mockllm.Recorder{"api.anthropic.com": rec, "api.openai.com": mockllm.NewRecorder(nil)}
	})
	var got MockRecording
	if resp := a.call(t, "GET", "/v1/mock/recording?host=API.Anthropic.com", "", nil, &got); resp.StatusCode != http.StatusOK || got.Host != "api.anthropic.com" || got.Exchanges != 1 {
		t.Fatalf("GET /v1/mock/recording: got %d %+v, want 200 and one exchange with api.anthropic.com", resp.StatusCode, got)
	}
	replay := mockllm.New(mustScript(t, got.Script))
	if status, answer := askMock(t, replay, "the word is quince"); status != http.StatusOK || !strings.Contains(answer, "from the real api") {
		t.Errorf("the recording replayed: got %d %s, want the recorded answer", status, answer)
	}
	var errBody struct {
		Error string `json:"error"`
	}
	if resp := a.call(t, "GET", "/v1/mock/recording", "", nil, &errBody); resp.StatusCode != http.StatusBadRequest || !strings.Contains(errBody.Error, "api.anthropic.com, api.openai.com") {
		t.Errorf("two recorded hosts, none named: got %d %q, want 400 listing them", resp.StatusCode, errBody.Error)
	}
	if resp := a.call(t, "GET", "/v1/mock/recording?host=other.example", "", nil, &errBody); resp.StatusCode != http.StatusNotFound || !strings.Contains(errBody.Error, "other.example is not recorded") {
		t.Errorf("a host not recorded: got %d %q, want 404", resp.StatusCode, errBody.Error)
	}
	none := startServer(t, netpolicy.Spec{}, nil)
	if resp := none.call(t, "GET", "/v1/mock/recording", "", nil, &errBody); resp.StatusCode != http.StatusNotFound || !strings.Contains(errBody.Error, "--record-llm") {
		t.Errorf("no recorder: got %d %q, want 404 naming --record-llm", resp.StatusCode, errBody.Error)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func mustScript(t *testing.T, y string) *mockllm.Script {
	t.Helper()
	s, err := mockllm.ParseScript("script.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
