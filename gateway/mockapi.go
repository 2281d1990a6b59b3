package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The mock LLM's part of the management API (DESIGN.md §15): turns queued
// at runtime, the journal of what the agent sent, and a reset. Each takes
// ?host=H, which may be left out when one host is mocked (and, for the
// reset, to reset them all).

// mockHosts returns the mocked hosts, sorted.
func (s *Server) mockHosts() []string {
	hosts := make([]string, 0, len(s.cfg.MockLLM))
	for h := range s.cfg.MockLLM {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	return hosts
}

// mockOf returns the host named by r's ?host= and its Responder, or
// answers why there is none and returns nil. With no ?host=, one host
// mocked is that host; all, when all are allowed, is nil with no answer
// and ok.
func (a *API) mockOf(w http.ResponseWriter, r *http.Request, all bool) (host string, m *mockllm.Responder, ok bool) {
	s := a.cfg.Server
	hosts := s.mockHosts()
	if len(hosts) == 0 {
		writeError(w, http.StatusNotFound, "this gateway mocks no LLM; start it with --mock-llm HOST=SCRIPT")
		return "", nil, false
	}
	raw := r.URL.Query().Get("host")
	if raw == "" {
		switch {
		case len(hosts) == 1:
			return hosts[0], s.mock(hosts[0]), true
		case all:
			return "", nil, true
		}
		writeError(w, http.StatusBadRequest, fmt.Sprintf("several hosts are mocked (%s); name one with ?host=", strings.Join(hosts, ", ")))
		return "", nil, false
	}
	host, err := netpolicy.NormalizeHost(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, "host: "+err.Error())
		return "", nil, false
	}
	if m = s.mock(host); m == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s is not mocked; the mocked hosts are %s", host, strings.Join(hosts, ", ")))
		return "", nil, false
	}
	return host, m, true
}

// mockExpect queues the turns of the body (a script, a list of turns or
// one turn; YAML or JSON) after the mock's: 200 with how many were
// queued, 400 naming each problem and queueing none. ?name= names the
// body in messages and in the turns' origins ("body" when absent), such
// as the file the CLI read it from.
func (a *API) mockExpect(w http.ResponseWriter, r *http.Request) {
	host, m, ok := a.mockOf(w, r, false)
	if !ok {
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, mockllm.MaxScriptSize))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", mockllm.MaxScriptSize))
		} else {
			writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		}
		return
	}
	name := "body"
	if n := r.URL.Query().Get("name"); n != "" {
		name = truncate(n, 200)
	}
	turns, err := mockllm.DecodeTurns(name, data)
	if err == nil {
		err = m.Expect(turns)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"host": host, "queued": len(turns)})
}

// mockRequests answers the mock's journal, oldest first, bodies included.
func (a *API) mockRequests(w http.ResponseWriter, r *http.Request) {
	host, m, ok := a.mockOf(w, r, false)
	if !ok {
		return
	}
	reqs := m.Requests()
	if reqs == nil {
		reqs = []mockllm.Journaled{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"host": host, "requests": reqs})
}

// mockReset restarts the named mock's script, or every mock's.
func (a *API) mockReset(w http.ResponseWriter, r *http.Request) {
	host, m, ok := a.mockOf(w, r, true)
	if !ok {
		return
	}
	hosts := []string{host}
	if m != nil {
		m.Reset()
	} else {
		hosts = a.cfg.Server.mockHosts()
		for _, h := range hosts {
			a.cfg.Server.mock(h).Reset()
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"reset": hosts})
}
