package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// LoadOrCreateToken returns the management API token stored in path. When
// the file does not exist it writes a new random token (32 bytes from
// crypto/rand, hex) there with mode 0600, creating the directory (0700).
// A token file readable by others or writable by anyone but its owner is
// refused (OpenToOthers): fix its mode. One readable by the process's own
// group is taken, as Kubernetes mounts a Secret's files (root's, the
// pod's fsGroup's) for a process of another uid to read.
func LoadOrCreateToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		fi, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		if OpenToOthers(fi) {
			return "", fmt.Errorf("token file %s has mode %#o, open to others; run chmod 600 %s", path, fi.Mode().Perm(), path)
		}
		tok := strings.TrimSpace(string(data))
		if len(tok) < 16 {
			return "", fmt.Errorf("token file %s holds a token of %d characters; use at least 16, or delete the file to have one made", path, len(tok))
		}
		return tok, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading token file: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("creating token file: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("creating token file: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("writing token file: %w", err)
	}
	return tok, f.Close()
}

// Gateway is what the management API acts on, which the gateway keeps:
// package gateway implements it over its proxy and hands it to the API,
// and a test can serve the API over a Gateway of its own. The API imports
// no package of the gateway's.
type Gateway interface {
	// Store is the store of the running policy: GET /v1/policy reads it
	// and the policy changes go through it, which records each.
	Store() *netpolicy.Store
	// Counts returns the decisions made since the gateway started and the
	// tunnels open now, for GET /v1/status.
	Counts() Counts
	// Metrics serves GET /metrics, in the Prometheus text format.
	Metrics() http.Handler
	// Mocks returns the mock LLMs the mock endpoints drive: by the host
	// they answer for (--mock-llm), and by the name of the policy's script
	// (response: {llm: NAME}). Neither map changes while the API serves.
	Mocks() (hosts, scripts map[string]*mockllm.Responder)
	// Recorders returns the recorders of the LLM APIs the gateway
	// records (--record-llm), by host, for GET /v1/mock/recording. The
	// map does not change while the API serves.
	Recorders() map[string]*mockllm.Recorder
	// Approvals returns the pending questions, oldest first, for GET
	// /v1/approvals.
	Approvals() []Approval
	// AnswerApproval answers question id with a, checked (its Scope and
	// By set), and returns the question as it stood. Errors wrap
	// ErrApprovalNotFound, ErrNoApprovalsFile or ErrInvalidAnswer, or
	// say what else failed.
	AnswerApproval(id string, a ApprovalAnswer) (Approval, error)
}

// ServerConfig configures the management API's server (docs/api.md).
type ServerConfig struct {
	// Gateway is what the API acts on. Required.
	Gateway Gateway
	// Sandbox is the sandbox's id, for /v1/status; "" for a standalone
	// gateway.
	Sandbox string
	// Token is the bearer token every path but /healthz needs. Required.
	Token string
	// Ring holds the recent decisions served at /v1/decisions; nil serves
	// none.
	Ring *decisionlog.Ring
	// ProxyAddrs are the proxy's addresses, for /v1/status.
	ProxyAddrs []string
}

// Server is the management API: an http.Handler that answers every
// endpoint of docs/api.md over a Gateway. Make one with NewServer.
type Server struct {
	cfg     ServerConfig
	token   [32]byte // sha256 of the token, compared in constant time
	started time.Time
	mux     *http.ServeMux
}

// NewServer returns the management API for cfg.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Gateway == nil || cfg.Token == "" {
		return nil, errors.New("api: ServerConfig needs Gateway and Token")
	}
	a := &Server{cfg: cfg, token: sha256.Sum256([]byte(cfg.Token)), started: time.Now(), mux: http.NewServeMux()}
	a.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	a.mux.HandleFunc("GET /v1/status", a.auth(a.status))
	a.mux.HandleFunc("GET /v1/policy", a.auth(a.getPolicy))
	a.mux.HandleFunc("PUT /v1/policy", a.auth(a.putPolicy))
	a.mux.HandleFunc("POST /v1/policy/rules", a.auth(a.addRule))
	a.mux.HandleFunc("DELETE /v1/policy/rules/{id}", a.auth(a.removeRule))
	a.mux.HandleFunc("GET /v1/decisions", a.auth(a.decisions))
	a.mux.HandleFunc("GET /v1/approvals", a.auth(a.listApprovals))
	a.mux.HandleFunc("POST /v1/approvals/{id}", a.auth(a.answerApproval))
	a.mux.HandleFunc("POST /v1/mock/expect", a.auth(a.mockExpect))
	a.mux.HandleFunc("GET /v1/mock/requests", a.auth(a.mockRequests))
	a.mux.HandleFunc("DELETE /v1/mock", a.auth(a.mockReset))
	a.mux.HandleFunc("GET /v1/mock/recording", a.auth(a.mockRecording))
	a.mux.HandleFunc("GET /v1/clients", a.auth(a.getClients))
	a.mux.HandleFunc("PUT /v1/clients", a.auth(a.putClients))
	metrics := cfg.Gateway.Metrics()
	a.mux.HandleFunc("GET /metrics", a.auth(metrics.ServeHTTP))
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return a, nil
}

// ServeHTTP serves the API.
func (a *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// Serve serves the API on ln until ctx is done, then shuts down, waiting
// (up to 2 s) for requests under way, so a change they make is logged
// before Serve returns. The caller must have recorded ln's address with
// the gateway's Server.AddOwnAddr before the proxy serves (gateway.Start
// does).
func (a *Server) Serve(ctx context.Context, ln net.Listener) error {
	var h http.Handler = a
	if _, ok := ln.Addr().(*net.TCPAddr); ok {
		h = hostCheck(a)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	shutdown := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(shutdown)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	})
	err := srv.Serve(ln)
	if stop() {
		close(shutdown) // Serve failed before ctx was done
	}
	<-shutdown
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// hostCheck refuses requests on a TCP listener whose Host is a name other
// than localhost, so that a web page cannot reach the API through DNS
// rebinding even before the token check.
func hostCheck(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err != nil && host != "localhost" {
			writeError(w, http.StatusForbidden, fmt.Sprintf("Host %q refused: the API answers only to an IP address or localhost", r.Host))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// auth wraps h with the bearer-token check.
func (a *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		ok = ok && strings.EqualFold(scheme, "Bearer")
		sum := sha256.Sum256([]byte(tok))
		if !ok || subtle.ConstantTimeCompare(sum[:], a.token[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token; send Authorization: Bearer <token from the token file>")
			return
		}
		h(w, r)
	}
}

// writeJSON answers v, one of the wire types, as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, ErrorBody{Error: msg})
}

func (a *Server) status(w http.ResponseWriter, _ *http.Request) {
	snap := a.cfg.Gateway.Store().Load()
	writeJSON(w, http.StatusOK, Status{
		Gateway:       a.cfg.ProxyAddrs,
		Sandbox:       a.cfg.Sandbox,
		UptimeSeconds: int64(time.Since(a.started).Seconds()),
		PolicyVersion: snap.Version(),
		Mode:          snap.Policy().Mode(),
		Counts:        a.cfg.Gateway.Counts(),
	})
}

func etag(v uint64) string { return `"` + strconv.FormatUint(v, 10) + `"` }

func (a *Server) getPolicy(w http.ResponseWriter, _ *http.Request) {
	snap := a.cfg.Gateway.Store().Load()
	w.Header().Set("ETag", etag(snap.Version()))
	writeJSON(w, http.StatusOK, Policy{Version: snap.Version(), Policy: snap.Policy().Spec()})
}

// ifMatchVersion returns the version an If-Match header asks for: 0 for
// none or "*", else the version in `"N"`.
func ifMatchVersion(r *http.Request) (uint64, error) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" || v == "*" {
		return 0, nil
	}
	n, err := strconv.ParseUint(strings.Trim(v, `"`), 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("If-Match %q: want the ETag of GET /v1/policy, such as \"3\"", v)
	}
	return n, nil
}

// readBody reads a request body of at most MaxPolicySize.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, netpolicy.MaxPolicySize))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", netpolicy.MaxPolicySize))
		} else {
			writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		}
		return nil, false
	}
	return data, true
}

// changed is the answer of a change that makes no more than a new
// version.
func changed(snap *netpolicy.Snapshot) PolicyChange {
	return PolicyChange{Change: snap.Change(), Version: snap.Version()}
}

// changeError answers a failed change with the status its error calls for.
func changeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, netpolicy.ErrVersionMismatch):
		writeError(w, http.StatusPreconditionFailed, err.Error())
	case errors.Is(err, netpolicy.ErrRuleNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	default:
		writeError(w, http.StatusBadRequest, err.Error())
	}
}

// change runs one policy change: If-Match and body read first, then fn;
// its answer is sent with status and its snapshot's ETag, its errors as
// changeError says. fn gets the expected version (0 for any) and the
// body, and returns the new snapshot and the answer, one of the wire
// types. The store serializes changes, and the server records each
// (gateway.Config.Log).
func (a *Server) change(w http.ResponseWriter, r *http.Request, status int, fn func(want uint64, body []byte) (*netpolicy.Snapshot, any, error)) {
	want, err := ifMatchVersion(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	data, ok := readBody(w, r)
	if !ok {
		return
	}
	snap, answer, err := fn(want, data)
	if err != nil {
		changeError(w, err)
		return
	}
	w.Header().Set("ETag", etag(snap.Version()))
	writeJSON(w, status, answer)
}

func (a *Server) putPolicy(w http.ResponseWriter, r *http.Request) {
	a.change(w, r, http.StatusOK, func(want uint64, body []byte) (*netpolicy.Snapshot, any, error) {
		spec, err := netpolicy.Decode("request body", body)
		if err != nil {
			return nil, nil, err
		}
		snap, err := a.cfg.Gateway.Store().Replace(spec, want)
		if err != nil {
			return nil, nil, err
		}
		return snap, changed(snap), nil
	})
}

func (a *Server) addRule(w http.ResponseWriter, r *http.Request) {
	a.change(w, r, http.StatusCreated, func(want uint64, body []byte) (*netpolicy.Snapshot, any, error) {
		rule, pos, err := netpolicy.DecodeAddRule("request body", body)
		if err != nil {
			return nil, nil, err
		}
		snap, added, err := a.cfg.Gateway.Store().AddRule(rule, pos, want)
		if err != nil {
			return nil, nil, err
		}
		return snap, RuleAdded{Change: snap.Change(), Rule: added, Version: snap.Version()}, nil
	})
}

func (a *Server) removeRule(w http.ResponseWriter, r *http.Request) {
	a.change(w, r, http.StatusOK, func(want uint64, _ []byte) (*netpolicy.Snapshot, any, error) {
		snap, err := a.cfg.Gateway.Store().RemoveRule(r.PathValue("id"), want)
		if err != nil {
			return nil, nil, err
		}
		return snap, changed(snap), nil
	})
}

// decisions serves a page of the ring, or with follow=1 an NDJSON stream of
// the backlog and then every new record until the client goes away.
func (a *Server) decisions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since uint64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("since=%q: want a record's seq, such as since=120", v))
			return
		}
		since = n
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit=%q: want a number from 1 to 10000", v))
			return
		}
		limit = n
	}
	ring := a.cfg.Ring
	if ring == nil {
		ring = decisionlog.NewRing(1)
	}
	if q.Get("follow") != "1" {
		lines, next := ring.Since(since, limit)
		raw := make([]json.RawMessage, len(lines))
		for i, l := range lines {
			raw[i] = json.RawMessage(strings.TrimSpace(string(l)))
		}
		writeJSON(w, http.StatusOK, Decisions{Decisions: raw, Next: next})
		return
	}
	backlog, sub := ring.Subscribe(since)
	defer sub.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	write := func(line []byte) bool {
		if _, err := w.Write(line); err != nil {
			return false
		}
		if len(line) == 0 || line[len(line)-1] != '\n' {
			w.Write([]byte{'\n'})
		}
		return true
	}
	for _, l := range backlog {
		if !write(l) {
			return
		}
	}
	rc.Flush()
	for {
		var l []byte
		var ok bool
		select {
		case <-r.Context().Done():
			return
		case l, ok = <-sub.C:
		}
		// Send what has queued up together, then flush.
		for more := true; more; {
			if !ok {
				if err := sub.Err(); err != nil {
					msg, _ := json.Marshal(ErrorBody{Error: err.Error() + "; reconnect with since= the last seq you received"})
					write(msg)
				}
				rc.Flush()
				return
			}
			if !write(l) {
				return
			}
			select {
			case l, ok = <-sub.C:
			default:
				more = false
			}
		}
		rc.Flush()
	}
}
