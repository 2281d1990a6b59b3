package api

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The mock LLM's part of the management API (docs/mock-llm.md): turns queued
// at runtime, the journal of what the agent sent, and a reset. Each names
// its mock with ?host=H (a --mock-llm host) or ?script=NAME (a script the
// policy's llm responses name), which may be left out when there is one
// mock (and, for the reset, to reset them all).

// mockRef names one mock: a mocked host's, or a policy script's.
type mockRef struct {
	host, script string // one is set
	m            *mockllm.Responder
}

// label is how answers and messages name the mock: the host, or
// "script NAME".
func (r mockRef) label() string {
	if r.script != "" {
		return "script " + r.script
	}
	return r.host
}

// names returns the fields of an answer that name the mock: Host or
// Script, and Mock.
func (r mockRef) names() (host, mock, script string) {
	return r.host, r.label(), r.script
}

// Journaled is a mock's journal entry as the API answers it, and as
// sbx mock requests prints one read from a journal file.
func Journaled(j mockllm.Journaled) MockRequest {
	return MockRequest{
		Seq: j.Seq, Time: j.Time, Method: j.Method, Path: j.Path, Dialect: string(j.Dialect), WebSocket: j.WebSocket,
		Model: j.Model, Stream: j.Stream, Body: j.Body, BodyTruncated: j.BodyTruncated,
		Turn: j.Turn, Unmatched: j.Unmatched, Default: j.Default, Status: j.Status, Outcome: j.Outcome,
	}
}

// mocks returns every mock: the mocked hosts, sorted, then the policy's
// scripts, sorted.
func (a *Server) mocks() []mockRef {
	hosts, scripts := a.cfg.Gateway.Mocks()
	var refs []mockRef
	for _, h := range slices.Sorted(maps.Keys(hosts)) {
		refs = append(refs, mockRef{host: h, m: hosts[h]})
	}
	for _, n := range slices.Sorted(maps.Keys(scripts)) {
		refs = append(refs, mockRef{script: n, m: scripts[n]})
	}
	return refs
}

// labels lists the mocks' labels for a message.
func labels(refs []mockRef) string {
	l := make([]string, len(refs))
	for i, r := range refs {
		l[i] = r.label()
	}
	return strings.Join(l, ", ")
}

// mockOf returns the mocks r's ?host= or ?script= names, or answers why
// there are none and returns nil. With neither, one mock is that mock;
// every mock, when all are allowed.
func (a *Server) mockOf(w http.ResponseWriter, r *http.Request, all bool) []mockRef {
	refs := a.mocks()
	if len(refs) == 0 {
		writeError(w, http.StatusNotFound, "this gateway mocks no LLM; start it with --mock-llm HOST=SCRIPT, or with a policy whose intercept rules answer with response: {llm: SCRIPT}")
		return nil
	}
	q := r.URL.Query()
	rawHost, script := q.Get("host"), q.Get("script")
	switch {
	case rawHost != "" && script != "":
		writeError(w, http.StatusBadRequest, "give ?host= or ?script=, not both")
		return nil
	case script != "":
		i := slices.IndexFunc(refs, func(m mockRef) bool { return m.script == script })
		if i < 0 {
			writeError(w, http.StatusNotFound, fmt.Sprintf("this gateway holds no LLM script %q; the mocks are %s", truncate(script, 200), labels(refs)))
			return nil
		}
		return refs[i : i+1]
	case rawHost != "":
		host, err := netpolicy.NormalizeHost(rawHost)
		if err != nil {
			writeError(w, http.StatusBadRequest, "host: "+err.Error())
			return nil
		}
		i := slices.IndexFunc(refs, func(m mockRef) bool { return m.host == host })
		if i < 0 {
			writeError(w, http.StatusNotFound, fmt.Sprintf("%s is not mocked; the mocks are %s", host, labels(refs)))
			return nil
		}
		return refs[i : i+1]
	case len(refs) == 1 || all:
		return refs
	}
	writeError(w, http.StatusBadRequest, fmt.Sprintf("there are several mocks (%s); name one with ?host= or ?script=", labels(refs)))
	return nil
}

// mockExpect queues the turns of the body (a script, a list of turns or
// one turn; YAML or JSON) after the mock's: 200 with how many were
// queued, 400 naming each problem and queueing none. ?name= names the
// body in messages and in the turns' origins ("body" when absent), such
// as the file the CLI read it from.
func (a *Server) mockExpect(w http.ResponseWriter, r *http.Request) {
	refs := a.mockOf(w, r, false)
	if refs == nil {
		return
	}
	m := refs[0]
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
		err = m.m.Expect(turns)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ans := MockQueued{Queued: len(turns)}
	ans.Host, ans.Mock, ans.Script = m.names()
	writeJSON(w, http.StatusOK, ans)
}

// mockRequests answers the mock's journal, oldest first, bodies included.
func (a *Server) mockRequests(w http.ResponseWriter, r *http.Request) {
	refs := a.mockOf(w, r, false)
	if refs == nil {
		return
	}
	journal := refs[0].m.Requests()
	ans := MockRequests{Requests: make([]MockRequest, len(journal))}
	for i, j := range journal {
		ans.Requests[i] = Journaled(j)
	}
	ans.Host, ans.Mock, ans.Script = refs[0].names()
	writeJSON(w, http.StatusOK, ans)
}

// mockReset restarts the named mock's script, or every mock's.
func (a *Server) mockReset(w http.ResponseWriter, r *http.Request) {
	refs := a.mockOf(w, r, true)
	if refs == nil {
		return
	}
	reset := make([]string, len(refs))
	for i, m := range refs {
		m.m.Reset()
		reset[i] = m.label()
	}
	writeJSON(w, http.StatusOK, MockReset{Reset: reset})
}

// truncate cuts s to at most n bytes for a message, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// mockRecording answers what a recorder of the gateway (--record-llm)
// has recorded so far, as the script it would write: ?host= names the
// recorded host, which may be left out when there is one.
func (a *Server) mockRecording(w http.ResponseWriter, r *http.Request) {
	recs := a.cfg.Gateway.Recorders()
	if len(recs) == 0 {
		writeError(w, http.StatusNotFound, "this gateway records no LLM; start it with --record-llm HOST=SCRIPT")
		return
	}
	hosts := slices.Sorted(maps.Keys(recs))
	host := hosts[0]
	switch raw := r.URL.Query().Get("host"); {
	case raw != "":
		h, err := netpolicy.NormalizeHost(raw)
		if err != nil {
			writeError(w, http.StatusBadRequest, "host: "+err.Error())
			return
		}
		if recs[h] == nil {
			writeError(w, http.StatusNotFound, fmt.Sprintf("%s is not recorded; the recorded hosts are %s", h, strings.Join(hosts, ", ")))
			return
		}
		host = h
	case len(hosts) > 1:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("several hosts are recorded (%s); name one with ?host=", strings.Join(hosts, ", ")))
		return
	}
	turns := recs[host].Turns()
	var b strings.Builder
	if err := mockllm.WriteScript(&b, turns); err != nil {
		writeError(w, http.StatusInternalServerError, "writing the recording: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, MockRecording{Host: host, Exchanges: len(turns), Script: b.String()})
}
