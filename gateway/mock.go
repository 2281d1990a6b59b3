package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// RuleMockLLM is the rule of the records of requests a mock LLM answered
// (Config.MockLLM) and of the CONNECTs to its hosts.
const RuleMockLLM = "mock-llm"

// normalizeMocks returns mocks keyed by normalized host.
func normalizeMocks(mocks map[string]*mockllm.Responder) (map[string]*mockllm.Responder, error) {
	if len(mocks) == 0 {
		return nil, nil
	}
	out := make(map[string]*mockllm.Responder, len(mocks))
	for host, r := range mocks {
		h, err := netpolicy.NormalizeHost(host)
		if err != nil {
			return nil, fmt.Errorf("gateway: Config.MockLLM host %q: %w", host, err)
		}
		if r == nil {
			return nil, fmt.Errorf("gateway: Config.MockLLM host %q has no Responder", host)
		}
		if _, dup := out[h]; dup {
			return nil, fmt.Errorf("gateway: Config.MockLLM names %s twice", h)
		}
		out[h] = r
	}
	return out, nil
}

// mock returns the Responder for host (normalized), or nil.
func (s *Server) mock(host string) *mockllm.Responder {
	return s.cfg.MockLLM[host]
}

// mockTunnelDecision is how a tunnel to a mocked host is decided: let in
// to be inspected, whatever the policy says, since no byte of it goes
// anywhere but to the mock; or, with no CA to inspect it, refused, since
// it would reach the real API.
func (s *Server) mockTunnelDecision(host string) netpolicy.Decision {
	if s.cfg.CA == nil {
		return netpolicy.Decision{Action: netpolicy.Block, Rule: RuleMockLLM,
			Reason: fmt.Sprintf("the mock LLM for %s answers HTTPS only with TLS inspection, and this gateway has no CA (give it one, or use an http:// base URL)", host)}
	}
	return netpolicy.Decision{Action: netpolicy.Allow, Rule: RuleMockLLM,
		Reason: fmt.Sprintf("the mock LLM answers for %s; its requests are inspected", host)}
}

// mockReason is the reason of the record of a request the mock answered:
// its outcome, which names the turn or the fault. An unmatched request's
// outcome describes the request from its body (the model, the start of the
// last user message); the decision log keeps no body, so the reason keeps
// only what went wrong and points at the journal, which has the rest.
func mockReason(j mockllm.Journaled) string {
	if !j.Unmatched {
		return "mock LLM: " + j.Outcome
	}
	why, _, _ := strings.Cut(j.Outcome, " (")
	return fmt.Sprintf("mock LLM: %s; request %d of the mock's journal says more (sbx mock requests)", why, j.Seq)
}

// serveMock answers a request to a mocked host with its Responder and
// logs it as an intercept by RuleMockLLM, its reason the Responder's
// outcome, once the Responder has chosen its answer. When the Responder
// cuts the connection it panics with http.ErrAbortHandler after the
// record is written; the caller's server closes the connection.
func (s *Server) serveMock(m *mockllm.Responder, w http.ResponseWriter, r *http.Request, rec *decisionlog.Record, start time.Time) {
	logged := false
	defer func() {
		if !logged { // the Responder panicked before deciding: log it all the same
			s.finishRefusal(rec, netpolicy.Decision{Action: netpolicy.Intercept, Rule: RuleMockLLM, Reason: "mock LLM: no answer"}, 0, start)
		}
	}()
	m.Serve(w, r, func(j mockllm.Journaled) {
		logged = true
		s.finishRefusal(rec, netpolicy.Decision{Action: netpolicy.Intercept, Rule: RuleMockLLM, Reason: mockReason(j)}, j.Status, start)
	})
}
