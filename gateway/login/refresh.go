package login

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/secrets"
)

// coalesce is how long a refresh's answer is given again to a refresh
// asked for meanwhile (an agent's retry, two of its processes): the
// refresh token it used is spent, and a sandboxed command asking again
// and again must not rotate the user's login on the host at its pace.
const coalesce = 5 * time.Minute

// Refresher returns the round tripper of an inspected HTTPS request to
// the login's token endpoint host (TokenEndpoint), before next, the
// gateway's upstream transport. A POST to the token endpoint's path that
// asks for grant_type refresh_token with the sandbox's placeholder
// refresh token (JSON or a form) is refreshed with the real refresh
// token, the new tokens written back to the host file, and answered in
// the endpoint's shape with placeholders; rec, the request's close
// record, names the tokens replaced (Secret) and a write-back that
// failed (Error). Every other request goes on as it came: its
// placeholders reach the endpoint as they are, worth nothing there.
func (l *Login) Refresher(next http.RoundTripper, rec *decisionlog.Record) http.RoundTripper {
	return refresher{l: l, next: next, rec: rec}
}

// refresher is Refresher's round tripper.
type refresher struct {
	l    *Login
	next http.RoundTripper
	rec  *decisionlog.Record
}

func (rt refresher) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || r.URL.Scheme != "https" || r.URL.Path != rt.l.a.tokenPath || r.Body == nil {
		return rt.next.RoundTrip(r)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxFile+1))
	if err != nil {
		r.Body.Close()
		return nil, err
	}
	if len(b) > maxFile { // no refresh: sent on whole, as it came
		r2 := r.Clone(r.Context())
		r2.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		return rt.next.RoundTrip(r2)
	}
	r.Body.Close()
	req, ok := parseRefresh(r.Header.Get("Content-Type"), b)
	if !ok || req.get("grant_type") != "refresh_token" || req.get("refresh_token") != rt.l.ph.refresh {
		r2 := r.Clone(r.Context())
		r2.Body, r2.ContentLength, r2.TransferEncoding = io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
		return rt.next.RoundTrip(r2)
	}
	return rt.l.refresh(r, req, rt.next, rt.rec)
}

// refreshRequest is the body of a refresh: JSON fields, or a form's.
type refreshRequest struct {
	json map[string]any
	form url.Values
}

func (q refreshRequest) get(k string) string {
	if q.form != nil {
		return q.form.Get(k)
	}
	s, _ := q.json[k].(string)
	return s
}

// encode is the refresh the gateway sends for q: the grant, the real
// refresh token and the agent's own client id, in q's encoding, and
// nothing else of what the sandbox wrote. A narrower scope or another
// parameter would reach the user's login on the host through the
// write-back; without a scope the endpoint grants the login's own
// (RFC 6749 §6).
func (q refreshRequest) encode(refresh, clientID string) ([]byte, string) {
	if q.form != nil {
		f := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}, "client_id": {clientID}}
		return []byte(f.Encode()), "application/x-www-form-urlencoded"
	}
	b, _ := json.Marshal(map[string]string{"grant_type": "refresh_token", "refresh_token": refresh, "client_id": clientID})
	return b, "application/json"
}

// parseRefresh parses a token request's body of content type ct.
func parseRefresh(ct string, b []byte) (refreshRequest, bool) {
	mt, _, _ := mime.ParseMediaType(ct)
	if mt == "application/x-www-form-urlencoded" {
		f, err := url.ParseQuery(string(b))
		if err != nil {
			return refreshRequest{}, false
		}
		for _, k := range []string{"grant_type", "refresh_token"} {
			if len(f[k]) > 1 {
				return refreshRequest{}, false // which one the endpoint takes is its own
			}
		}
		return refreshRequest{form: f}, true
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return refreshRequest{}, false
	}
	return refreshRequest{json: m}, true
}

// refresh performs the refresh r asked for, with the real refresh token
// and the agent's client id (encode), through next.
func (l *Login) refresh(r *http.Request, q refreshRequest, next http.RoundTripper, rec *decisionlog.Record) (*http.Response, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lastAnswer != nil && l.now().Sub(l.last) < coalesce {
		l.note(rec)
		return answer(r, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, l.lastAnswer), nil
	}
	var hf *openFile
	if l.host != nil {
		f, cur, err := l.host.open(l.a)
		if err != nil {
			return nil, fmt.Errorf("login %s: reading %s: %w", l.a.name, l.a.file, err)
		}
		defer f.close()
		hf = f
		if cur.refresh != l.real.refresh { // the host's agent refreshed meanwhile: its tokens are the live ones
			l.real = cur
			l.rotate(cur.access)
		}
	}
	used := l.real
	body, ct := q.encode(used.refresh, l.a.clientID)
	up := r.Clone(r.Context())
	up.Body, up.ContentLength, up.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	up.Header.Set("Content-Type", ct)
	up.Header.Del("Accept-Encoding") // the answer is read here, decoded by the transport
	up.Header.Del("Content-Length")
	resp, err := next.RoundTrip(up)
	if err != nil {
		return nil, errors.New(l.scrubText(err.Error(), used))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxFile+1))
	if err != nil {
		return nil, errors.New(l.scrubText(err.Error(), used))
	}
	h := resp.Header.Clone()
	h.Del("Content-Encoding")
	scrubHeader := func(t tokens) { // an endpoint that quotes what it was sent, or sets what it gave
		for _, vs := range h {
			for i, v := range vs {
				vs[i] = l.scrubText(v, t)
			}
		}
	}
	scrubHeader(used)
	if resp.StatusCode != http.StatusOK {
		return answer(r, resp.StatusCode, h, []byte(l.scrubText(string(b), used))), nil
	}
	var ans map[string]any
	if len(b) > maxFile || unmarshalNumbers(b, &ans) != nil {
		// New tokens the gateway cannot read may be in it, and the
		// refresh token it used may be spent: nothing of it goes on.
		rec.Error = fmt.Sprintf("login %s: the token endpoint's answer to a refresh is not JSON of at most 64 KiB: the login may be lost (log in again on the host)", l.a.name)
		return answer(r, http.StatusBadGateway, http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, []byte("sbx: the token endpoint's answer is not JSON of at most 64 KiB\n")), nil
	}
	fresh := used
	for k, p := range map[string]*string{"access_token": &fresh.access, "refresh_token": &fresh.refresh, "id_token": &fresh.id} {
		if s, ok := ans[k].(string); ok && s != "" {
			*p = s
		}
	}
	scrubHeader(fresh)
	if hf != nil {
		if err := hf.writeBack(l.a, used, fresh, ans, l.now()); err != nil {
			rec.Error = fmt.Sprintf("login %s: the refreshed tokens are kept in the gateway only: %v", l.a.name, err)
		}
	}
	l.real = fresh
	l.rotate(fresh.access)
	for k, ph := range map[string]string{"access_token": l.ph.access, "refresh_token": l.ph.refresh, "id_token": l.ph.id} {
		if _, ok := ans[k]; ok {
			ans[k] = ph
		}
	}
	if _, ok := ans["id_token"].(string); ok && fresh.id != "" {
		ans["id_token"] = neuterJWT(fresh.id, l.ph.id[strings.LastIndexByte(l.ph.id, '.')+1:])
	}
	out, _ := json.Marshal(ans)
	out = []byte(l.scrubText(l.scrubText(string(out), used), fresh))
	l.last, l.lastAnswer = l.now(), out
	l.note(rec)
	h.Set("Content-Type", "application/json")
	return answer(r, http.StatusOK, h, out), nil
}

// note names, in rec, the tokens a refresh's answer had replaced.
func (l *Login) note(rec *decisionlog.Record) {
	found := secrets.NoteFound(rec)
	found(l.access.Name())
	found(l.a.secretBase + "_REFRESH_TOKEN")
}

// rotate puts access in place of the access token's value in the Set.
func (l *Login) rotate(access string) {
	if l.set != nil {
		l.set.Rotate(l.access.Name(), access) //nolint:errcheck // a value the endpoint gave that a header cannot carry is refused by the upstream
	}
}

// scrubText is s with each of t's tokens replaced by its placeholder.
func (l *Login) scrubText(s string, t tokens) string {
	for _, p := range [][2]string{{t.refresh, l.ph.refresh}, {t.access, l.ph.access}, {t.id, l.ph.id}, {t.apiKey, l.ph.apiKey}} {
		if p[0] != "" {
			s = strings.ReplaceAll(s, p[0], p[1])
		}
	}
	return s
}

// answer is a response of status to r with header h and body b.
func answer(r *http.Request, status int, h http.Header, b []byte) *http.Response {
	h.Set("Content-Length", strconv.Itoa(len(b)))
	return &http.Response{Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Body: io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)), Request: r}
}
