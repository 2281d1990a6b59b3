package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// http1Client goes through the gateway over HTTP/1.1, which a WebSocket
// upgrade needs, and trusts only the sandbox's CA.
func (m *mockSetup) http1Client(t *testing.T) *http.Client {
	proxy, _ := url.Parse("http://" + m.g.addr)
	pool := x509.NewCertPool()
	pool.AddCert(m.ca.Certificate())
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// TestMockLLMWebSocketHTTPS: the Responses API's WebSocket mode at the
// real host, through the gateway's inspecting TLS path, is answered by
// the mock from its script, each response.create a decision record of
// its own; the policy blocks everything and nothing is dialed. The
// OpenAI SDK's WebSocket client reads the answers.
func TestMockLLMWebSocketHTTPS(t *testing.T) {
	m := newMockSetup(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	oc := openai.NewClient(ooption.WithBaseURL("https://api.openai.com/v1/"), ooption.WithAPIKey("sk-test"),
		ooption.WithMaxRetries(0), ooption.WithHTTPClient(m.http1Client(t)))
	conn, err := oc.Responses.Connect(ctx, responses.ResponseConnectionOptions{})
	if err != nil {
		t.Fatalf("Responses.Connect through the gateway: %v", err)
	}
	for _, tc := range []struct{ user, want string }{
		{"hello", "Hi from the OpenAI mock."},
		{"stream", "Streamed over chat completions."},
	} {
		create := responses.ResponsesClientEventResponseCreateParam{Model: "gpt-5"}
		create.Input.OfString = openai.String(tc.user)
		if err := conn.Create(ctx, create); err != nil {
			t.Fatalf("Create: %v", err)
		}
		for {
			ev, err := conn.Recv(ctx)
			if err != nil {
				t.Fatalf("%s: Recv: %v", tc.user, err)
			}
			if ev.Type == "response.completed" {
				if got := ev.OfResponsesServerEventResponseWsCompleted.Response.OutputText(); got != tc.want {
					t.Errorf("%s: got %q, want %q", tc.user, got, tc.want)
				}
				break
			}
		}
	}
	conn.Close()

	recs := recordsOfKind(t, m.g.ring, decisionlog.KindHTTPS)
	want := []string{"mock LLM: turn 1 (openai.yaml:2): reply", "mock LLM: turn 2 (openai.yaml:4): reply"}
	if len(recs) != len(want) {
		t.Fatalf("got %d HTTPS decision records, want %d: %v", len(recs), len(want), recs)
	}
	for i, r := range recs {
		if r["host"] != "api.openai.com" || r["method"] != "GET" || r["path"] != "/v1/responses" || r["action"] != "intercept" || r["rule"] != RuleMockLLM || r["reason"] != want[i] || r["status"] != 200.0 {
			t.Errorf("record %d: got %v, want GET /v1/responses intercepted by %s, status 200, reason %q", i, r, RuleMockLLM, want[i])
		}
	}
	if recs[0]["id"] == recs[1]["id"] {
		t.Errorf("got records with the same id %v, want one id per request", recs[0]["id"])
	}
	if j := m.openai.Requests(); len(j) != 2 || !j[0].WebSocket || !strings.Contains(string(j[1].Body), `"stream"`) {
		t.Errorf("got journal %+v, want the two response.create messages", j)
	}
}

// TestMockLLMWebSocketUnused: a WebSocket to the mock that closes without
// a request leaves one record saying so; over plain http:// through the
// proxy, where the mock does not take the connection over, the upgrade is
// answered 426, which makes the Codex CLI use HTTP at once.
func TestMockLLMWebSocketUnused(t *testing.T) {
	m := newMockSetup(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "wss://api.openai.com/v1/responses", &websocket.DialOptions{HTTPClient: m.http1Client(t)})
	if err != nil {
		t.Fatalf("dialing the mock's WebSocket: %v", err)
	}
	c.Close(websocket.StatusNormalClosure, "")
	var recs []map[string]any
	waitUntil(t, func() bool {
		recs = recordsOfKind(t, m.g.ring, decisionlog.KindHTTPS)
		return len(recs) > 0
	})
	if len(recs) != 1 || recs[0]["reason"] != "mock LLM: a WebSocket closed without a response.create" || recs[0]["status"] != 101.0 {
		t.Errorf("got %v, want one record of a WebSocket closed unused, status 101", recs)
	}

	_, resp, err := websocket.Dial(ctx, "ws://api.openai.com/v1/responses", &websocket.DialOptions{HTTPClient: m.http1Client(t)})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("plain http:// upgrade: got %v (%v), want 426", resp, err)
	}
}

// waitUntil waits up to five seconds for cond.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
