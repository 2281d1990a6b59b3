package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Error is an answer other than 2xx, with the API's message. Callers act
// on Status (errors.As): 401 for a wrong token, 404 for a rule or mock
// that is not there, 400 for an invalid policy, rule or script, 412 for a
// stale If-Match.
type Error struct {
	// Method and Path are the request's.
	Method, Path string
	// Status is the HTTP status.
	Status int
	// Message is the API's {"error": ...}; "" when the body held none.
	Message string
	// Code is the API's {"code": ...}, which errors.Is matches with the
	// error it stands for (ErrApprovalAnswered, ErrNoApprovalsFile); ""
	// for most errors.
	Code string
}

// Is reports whether target is the error e's Code stands for.
func (e *Error) Is(target error) bool {
	code, ok := errorCodes[target]
	return ok && e.Code == code
}

func (e *Error) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
}

// StreamError is the error line that ends a decision stream which fell
// behind the ring: the records after the last one received are lost to
// the stream (the decision log file keeps them). Reconnect with since=
// the last seq received to go on.
type StreamError struct {
	Message string
}

func (e *StreamError) Error() string { return "the decision stream ended: " + e.Message }

// Client talks to one gateway's management API. Make one with NewClient;
// it is safe for concurrent use.
type Client struct {
	addr  string
	base  string // http://host:port, or http://localhost on a socket
	token string
	http  *http.Client
}

// requestTimeout bounds each request but a decision stream.
const requestTimeout = 30 * time.Second

// maxAnswer bounds an answer's body; a mock's journal is the largest.
const maxAnswer = 64 << 20

// NewClient returns a client of the API at addr, "unix:PATH" or a TCP
// "host:port", that sends token as its bearer token. It connects on the
// first request; Close releases its idle connections.
func NewClient(addr, token string) (*Client, error) {
	c := &Client{addr: addr, token: token}
	tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return nil, fmt.Errorf("API address %q names no socket; write unix:PATH", addr)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}
		c.base = "http://localhost"
	} else {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("API address %q: %w; write host:port or unix:PATH", addr, err)
		}
		tr.Proxy = nil // the API is local: never through a proxy
		c.base = "http://" + addr
	}
	c.http = &http.Client{Transport: tr}
	return c, nil
}

// Addr returns the address the client talks to, as given to NewClient.
func (c *Client) Addr() string { return c.addr }

// Close closes the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// request is one call: method and path (with its query), body, extra
// headers.
type request struct {
	method, path string
	body         []byte
	header       http.Header
}

// ifMatch returns the If-Match header for version, none for 0.
func ifMatch(version uint64) http.Header {
	if version == 0 {
		return nil
	}
	return http.Header{"If-Match": {`"` + strconv.FormatUint(version, 10) + `"`}}
}

// send sends r and returns the response of a 2xx answer; any other is an
// *Error. The caller closes the body.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.base+r.path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the management API at %s does not answer (is its gateway still running?): %w", c.addr, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := &Error{Method: r.method, Path: pathOnly(r.path), Status: resp.StatusCode}
	var eb ErrorBody
	if json.Unmarshal(data, &eb) == nil {
		e.Message, e.Code = eb.Error, eb.Code
	}
	return nil, e
}

// pathOnly is path without its query, for messages.
func pathOnly(path string) string {
	p, _, _ := strings.Cut(path, "?")
	return p
}

// do sends r and decodes the JSON answer into out, within requestTimeout.
// It returns the response (its body read and closed) for the headers.
func (c *Client) do(ctx context.Context, r request, out any) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s %s from %s: %w", r.method, pathOnly(r.path), c.addr, err)
	}
	if out == nil {
		return resp, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("the answer of %s %s from %s is not the management API's JSON (%w); is %s a gateway's API address?", r.method, pathOnly(r.path), c.addr, err, c.addr)
	}
	return resp, nil
}

// Healthz asks GET /healthz, which needs no token: nil when the API
// answers.
func (c *Client) Healthz(ctx context.Context) error {
	_, err := c.do(ctx, request{method: "GET", path: "/healthz"}, nil)
	return err
}

// Status returns GET /v1/status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	if _, err := c.do(ctx, request{method: "GET", path: "/v1/status"}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Policy returns GET /v1/policy: the running policy and its version.
func (c *Client) Policy(ctx context.Context) (*Policy, error) {
	var p Policy
	if _, err := c.do(ctx, request{method: "GET", path: "/v1/policy"}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ReplacePolicy sends PUT /v1/policy: policy is a policy file (YAML or
// JSON). With ifVersion other than 0 the change is made only if the
// running policy is that version (else an *Error with status 412).
func (c *Client) ReplacePolicy(ctx context.Context, policy []byte, ifVersion uint64) (*PolicyChange, error) {
	var ch PolicyChange
	if _, err := c.do(ctx, request{method: "PUT", path: "/v1/policy", body: policy, header: ifMatch(ifVersion)}, &ch); err != nil {
		return nil, err
	}
	return &ch, nil
}

// AddRule sends POST /v1/policy/rules; ifVersion as for ReplacePolicy.
func (c *Client) AddRule(ctx context.Context, rule AddRule, ifVersion uint64) (*RuleAdded, error) {
	body, err := json.Marshal(rule)
	if err != nil {
		return nil, err
	}
	hdr := ifMatch(ifVersion)
	if hdr == nil {
		hdr = http.Header{}
	}
	hdr.Set("Content-Type", "application/json")
	var added RuleAdded
	if _, err := c.do(ctx, request{method: "POST", path: "/v1/policy/rules", body: body, header: hdr}, &added); err != nil {
		return nil, err
	}
	return &added, nil
}

// RemoveRule sends DELETE /v1/policy/rules/{id}: an *Error with status 404
// when no rule has that id; ifVersion as for ReplacePolicy.
func (c *Client) RemoveRule(ctx context.Context, id string, ifVersion uint64) (*PolicyChange, error) {
	var ch PolicyChange
	if _, err := c.do(ctx, request{method: "DELETE", path: "/v1/policy/rules/" + url.PathEscape(id), header: ifMatch(ifVersion)}, &ch); err != nil {
		return nil, err
	}
	return &ch, nil
}

// Approvals returns GET /v1/approvals: the pending questions, oldest
// first.
func (c *Client) Approvals(ctx context.Context) (*Approvals, error) {
	var a Approvals
	if _, err := c.do(ctx, request{method: "GET", path: "/v1/approvals"}, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// AnswerApproval sends POST /v1/approvals/{id}: an *Error with status 404
// when no question with that id is pending, 409 for an always answer the
// gateway has no file for, 400 for a bad answer.
func (c *Client) AnswerApproval(ctx context.Context, id string, a ApprovalAnswer) (*ApprovalAnswered, error) {
	body, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	var out ApprovalAnswered
	hdr := http.Header{"Content-Type": {"application/json"}}
	if _, err := c.do(ctx, request{method: "POST", path: "/v1/approvals/" + url.PathEscape(id), body: body, header: hdr}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Decisions returns GET /v1/decisions: at most limit records (0: the
// API's default, 1000) after seq since.
func (c *Client) Decisions(ctx context.Context, since uint64, limit int) (*Decisions, error) {
	q := url.Values{"since": {strconv.FormatUint(since, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var d Decisions
	if _, err := c.do(ctx, request{method: "GET", path: "/v1/decisions?" + q.Encode()}, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// DecisionStream is an open GET /v1/decisions?follow=1. Read it with Next
// and Close it when done; it is not safe for concurrent use.
type DecisionStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

// FollowDecisions opens GET /v1/decisions?follow=1: the records after seq
// since, then each new one until ctx is done, the stream is closed or the
// gateway stops.
func (c *Client) FollowDecisions(ctx context.Context, since uint64) (*DecisionStream, error) {
	resp, err := c.send(ctx, request{method: "GET", path: "/v1/decisions?follow=1&since=" + strconv.FormatUint(since, 10)})
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &DecisionStream{body: resp.Body, sc: sc}, nil
}

// Next returns the next record, as the log wrote it. It returns io.EOF
// when the gateway ended the stream (it stopped), a *StreamError when the
// stream fell behind, and the read's error when ctx ended or the
// connection broke.
func (s *DecisionStream) Next() (json.RawMessage, error) {
	for s.sc.Scan() {
		line := bytes.TrimSpace(s.sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if e, ok := errorLine(line); ok {
			return nil, &StreamError{Message: e}
		}
		return json.RawMessage(bytes.Clone(line)), nil
	}
	if err := s.sc.Err(); err != nil {
		return nil, err
	}
	return nil, io.EOF
}

// errorLine reports whether line is an ErrorBody and nothing else (a
// decision record may have an error field, among others).
func errorLine(line []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var eb ErrorBody
	if dec.Decode(&eb) != nil || eb.Error == "" {
		return "", false
	}
	return eb.Error, true
}

// Close ends the stream.
func (s *DecisionStream) Close() error { return s.body.Close() }

// Mock names one mock LLM of the gateway: a mocked host (--mock-llm HOST)
// or a policy's script (response: {llm: NAME}). The zero Mock is the
// gateway's only mock, or every mock for MockReset.
type Mock struct {
	Host   string
	Script string
}

// query is m's part of a mock endpoint's query, with the other
// parameters kv (name, value, ...) that are not empty.
func (m Mock) query(kv ...string) string {
	q := url.Values{}
	if m.Host != "" {
		q.Set("host", m.Host)
	}
	if m.Script != "" {
		q.Set("script", m.Script)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// MockExpect sends POST /v1/mock/expect: script is turns (a script, a
// list of turns or one turn, YAML or JSON) to queue after the mock's;
// name names it in messages ("" for "body"). An invalid script is an
// *Error with status 400 naming each problem, and nothing is queued.
func (c *Client) MockExpect(ctx context.Context, m Mock, name string, script []byte) (*MockQueued, error) {
	var q MockQueued
	if _, err := c.do(ctx, request{method: "POST", path: "/v1/mock/expect" + m.query("name", name), body: script}, &q); err != nil {
		return nil, err
	}
	return &q, nil
}

// MockRequests returns GET /v1/mock/requests: the mock's journal.
func (c *Client) MockRequests(ctx context.Context, m Mock) (*MockRequests, error) {
	var r MockRequests
	if _, err := c.do(ctx, request{method: "GET", path: "/v1/mock/requests" + m.query()}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// MockRecording returns GET /v1/mock/recording: what the gateway has
// recorded of host so far ("" for its only recorded host), as a script.
func (c *Client) MockRecording(ctx context.Context, host string) (*MockRecording, error) {
	var r MockRecording
	if _, err := c.do(ctx, request{method: "GET", path: "/v1/mock/recording" + Mock{Host: host}.query()}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// MockReset sends DELETE /v1/mock: the mock starts its script over (every
// mock, for the zero Mock).
func (c *Client) MockReset(ctx context.Context, m Mock) (*MockReset, error) {
	var r MockReset
	if _, err := c.do(ctx, request{method: "DELETE", path: "/v1/mock" + m.query()}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Metrics returns GET /metrics, in the Prometheus text format.
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := c.send(ctx, request{method: "GET", path: "/metrics"})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
}
