package api

import (
	"encoding/json"
	"time"

	"github.com/sbx-dev/sbx/netpolicy"
)

// The wire types. Field names and shapes are a contract (docs/api.md).
// Fields are declared in the order of their JSON names, so that an answer
// encodes as it did when the server wrote maps, whose keys encoding/json
// sorts: a client that compares bytes sees no change.

// ErrorBody is the body of every error answer, and the last line of a
// decision stream that fell behind: {"error": "..."}. Code, when set,
// tells apart the errors that share a status (errorCodes), for clients.
type ErrorBody struct {
	Code  string `json:"code,omitempty"`
	Error string `json:"error"`
}

// Status is the answer of GET /v1/status.
type Status struct {
	// Counts are the gateway's decisions since it started.
	Counts Counts `json:"counts"`
	// Gateway lists the proxy's addresses.
	Gateway []string `json:"gateway"`
	// Mode is the running policy's mode: enforce or audit.
	Mode netpolicy.Mode `json:"mode"`
	// PolicyVersion is the running policy's version (the ETag of GET
	// /v1/policy).
	PolicyVersion uint64 `json:"policy_version"`
	// Sandbox is the sandbox's id; "" for a standalone gateway.
	Sandbox string `json:"sandbox"`
	// UptimeSeconds is how long the API has been serving, in whole
	// seconds.
	UptimeSeconds int64 `json:"uptime_seconds"`
}

// Counts are Status's counters.
type Counts struct {
	Allowed     uint64 `json:"allowed"`
	Blocked     uint64 `json:"blocked"`
	Intercepted uint64 `json:"intercepted"`
	// OpenTunnels is how many CONNECT tunnels are open now.
	OpenTunnels int64 `json:"open_tunnels"`
}

// Policy is the answer of GET /v1/policy; its Version is the ETag.
type Policy struct {
	Version uint64         `json:"version"`
	Policy  netpolicy.Spec `json:"policy"`
}

// PolicyChange is the answer of PUT /v1/policy and DELETE
// /v1/policy/rules/{id}: the new version and the change in words, as the
// policy record of the decision log says it.
type PolicyChange struct {
	Change  string `json:"change"`
	Version uint64 `json:"version"`
}

// AddRule is the request of POST /v1/policy/rules: a policy file's rule
// and where to put it.
type AddRule struct {
	netpolicy.Rule
	// Position is where the rule goes: 0 is first; nil is last.
	Position *int `json:"position,omitempty"`
}

// RuleAdded is the answer of POST /v1/policy/rules: the change and the
// rule as added, its id assigned.
type RuleAdded struct {
	Change  string         `json:"change"`
	Rule    netpolicy.Rule `json:"rule"`
	Version uint64         `json:"version"`
}

// Decisions is the answer of GET /v1/decisions: a page of decision log
// records (docs/decision-log.md), as the log wrote them, and the seq to
// ask for the next page with (since=).
type Decisions struct {
	Decisions []json.RawMessage `json:"decisions"`
	Next      uint64            `json:"next"`
}

// MockQueued is the answer of POST /v1/mock/expect.
type MockQueued struct {
	// Host is the mocked host's name, or Script the policy's script's
	// name: one of them is set.
	Host string `json:"host,omitempty"`
	// Mock names the mock in words: the host, or "script NAME".
	Mock   string `json:"mock"`
	Queued int    `json:"queued"`
	Script string `json:"script,omitempty"`
}

// MockRequests is the answer of GET /v1/mock/requests: the mock's
// journal, oldest first.
type MockRequests struct {
	// Host, Mock and Script are as in MockQueued.
	Host     string        `json:"host,omitempty"`
	Mock     string        `json:"mock"`
	Requests []MockRequest `json:"requests"`
	Script   string        `json:"script,omitempty"`
}

// MockRequest is one request of a mock's journal (docs/mock-llm.md). Its
// fields are in the order the mock keeps them.
type MockRequest struct {
	// Seq numbers the requests since the start or the last reset, from
	// 1; a gap before the first says older ones were dropped.
	Seq  int       `json:"seq"`
	Time time.Time `json:"time"`
	// Method and Path are the request's; the query is left out.
	Method string `json:"method"`
	Path   string `json:"path"`
	// Dialect is the LLM API the path names ("anthropic", "openai-chat",
	// "openai-responses", "gemini"); empty for an unknown path.
	Dialect string `json:"dialect,omitempty"`
	// WebSocket says the request is a response.create message on a
	// WebSocket of the Responses API (GET /v1/responses upgraded).
	WebSocket bool `json:"websocket,omitempty"`
	// Model and Stream are the request's model and stream fields.
	Model  string `json:"model,omitempty"`
	Stream bool   `json:"stream,omitempty"`
	// Body is the request's body: its JSON as sent, or a JSON string of
	// its start when it was not JSON or too long (BodyTruncated).
	Body          json.RawMessage `json:"body,omitempty"`
	BodyTruncated bool            `json:"body_truncated,omitempty"`
	// Turn is the 1-based turn that answered; 0 when none did.
	Turn int `json:"turn,omitempty"`
	// Unmatched says no turn answered: the request got an error.
	Unmatched bool `json:"unmatched,omitempty"`
	// Default says the mock answered by its fixed rule, not from the
	// script: the models list, a token count, or a request that is not for
	// a model (docs/mock-llm.md).
	Default bool `json:"default,omitempty"`
	// Status is the HTTP status answered; 0 when the client went away.
	Status int `json:"status"`
	// Outcome says in words what happened.
	Outcome string `json:"outcome"`
}

// MockRecording is the answer of GET /v1/mock/recording: what a
// recorder (--record-llm) has recorded of Host so far, as the script
// --mock-llm replays (YAML), and the number of its exchanges.
type MockRecording struct {
	Host      string `json:"host"`
	Exchanges int    `json:"exchanges"`
	Script    string `json:"script"`
}

// MockReset is the answer of DELETE /v1/mock: the mocks that were reset,
// as MockQueued.Mock names them.
type MockReset struct {
	Reset []string `json:"reset"`
}
