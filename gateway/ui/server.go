package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
)

// Sandboxes is where the view finds the host's sandboxes. cmd/sbx
// implements it over the state and log directories, as sbx ps and sbx
// audit --sandbox find them. Its methods must be safe for concurrent use.
type Sandboxes interface {
	// List returns the running sandboxes and the ended ones whose logs
	// are kept.
	List(ctx context.Context) ([]Sandbox, error)
	// Client returns a client of the management API of the running
	// sandbox id, as List returned it; the view closes it after use.
	Client(ctx context.Context, id string) (*api.Client, error)
	// OpenLog opens the decision log of sandbox id, as List returned it;
	// the view closes it.
	OpenLog(ctx context.Context, id string) (io.ReadCloser, error)
}

// Sandbox is one sandbox as the view lists it.
type Sandbox struct {
	ID   string
	Name string
	// Status is the sandbox's status as sbx ps shows it (starting,
	// running, stopping; a cluster sandbox's may be another word, such as
	// "gateway gone", when its API cannot answer), or "ended".
	Status string
	// Command is the sandbox's command; nil for an ended sandbox.
	Command []string
	// Time is when it was created, or when its log was last written for
	// an ended one.
	Time time.Time
	// HasLog says a decision log of it is kept, which the audit page
	// reads.
	HasLog bool
	// Where is where it runs, for the listing: "" for this host, else
	// what names the place, such as "cluster, namespace agents".
	Where string
	// Health is a cluster sandbox's health in a few words, as sbx kube
	// ps shows it ("ok", "gateway gone: ..."); "" for this host's.
	Health string
	// NoAlways says its gateway keeps no file for the rules of always
	// answers (a cluster sandbox's gateway pod keeps none): its page
	// offers once and session answers alone, and says why.
	NoAlways bool
}

// StatusEnded is the Status of a sandbox that no longer runs.
const StatusEnded = "ended"

// Running reports whether the sandbox runs (its API may answer).
func (s Sandbox) Running() bool { return s.Status != StatusEnded }

// reachable reports whether the listing asks the sandbox's API for its
// figures: it runs, and is not starting (its API may not answer yet, and
// sbx ps does not ask either) or a cluster sandbox whose gateway is gone.
func (s Sandbox) reachable() bool { return s.Status == "running" || s.Status == "stopping" }

// Config configures Start. Sandboxes is required.
type Config struct {
	// Sandboxes is where the sandboxes are found.
	Sandboxes Sandboxes
	// Port is the port to listen on at 127.0.0.1; 0 takes a free one.
	Port int
	// Logger receives operational messages; nil discards them.
	Logger *slog.Logger

	// now is the clock of sessions and answers; nil is time.Now. Tests
	// set it.
	now func() time.Time
	// peerUID returns the uid of the program at the other end of a
	// connection; nil is the kernel's answer (peerUID). Tests set it.
	peerUID func(local, remote net.Addr) (uint32, error)
}

// SessionIdle is how long a session lasts without a request: past it,
// its cookie is refused and the view must be started again (its token
// was used).
const SessionIdle = 12 * time.Hour

// AnswerDelay is how long a question must have been asked before the
// view takes an answer to it, and how long the page keeps a question's
// buttons disabled after the questions shown change, as browsers do
// with their permission prompts: a click meant for a question that just
// went lands on nothing rather than on the one that took its place.
const AnswerDelay = time.Second

// Server is a running view made by Start. Close stops it.
type Server struct {
	cfg    Config
	ln     net.Listener
	srv    *http.Server
	port   int
	token  string // the printed URL's
	key    []byte // signs session cookies and derives their CSRF tokens
	cookie string // the session cookie's name, which holds the port
	origin string // http://127.0.0.1:PORT, the only origin of its pages
	pages  *pages
	done   chan error

	mu        sync.Mutex
	tokenUsed bool                // the token was exchanged for a session
	sessions  map[string]*session // by nonce
	loggedIn  chan struct{}       // closed when the token is used
}

// session is what the view knows of a browser's session.
type session struct {
	last time.Time // its last request
	// uid is the user whose program (the browser) exchanged the token;
	// bound says the system told it (Linux), and then only that user's
	// programs may use the session.
	uid   uint32
	bound bool
}

// peer is the user at the other end of a connection, as found when the
// connection was accepted: uid, or err when it could not be told.
type peer struct {
	uid uint32
	err error
}

type peerKey struct{}

// Start listens on 127.0.0.1:cfg.Port and serves the view until ctx is
// done or Close is called; URL is the address to open. Close must always
// be called.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Sandboxes == nil {
		return nil, errors.New("ui: Config.Sandboxes is required")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("port %d is not a TCP port; give 0 (any free port) to 65535", cfg.Port)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.peerUID == nil {
		cfg.peerUID = peerUID
	}
	s := &Server{cfg: cfg, token: randomHex(32), key: []byte(randomHex(32)), done: make(chan error, 1),
		sessions: map[string]*session{}, loggedIn: make(chan struct{})}
	ln, ln6, err := listen(cfg.Port)
	if err != nil {
		return nil, err
	}
	s.ln = ln
	s.port = ln.Addr().(*net.TCPAddr).Port
	s.cookie = "sbx_ui_" + strconv.Itoa(s.port)
	s.origin = "http://127.0.0.1:" + strconv.Itoa(s.port)
	s.pages = newPages(cfg.Sandboxes, cfg.Logger, s.csrfToken, cfg.now)
	ctx, cancel := context.WithCancel(ctx)
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Handlers' contexts end when the view stops, so that live
		// streams end with it.
		BaseContext: func(net.Listener) context.Context { return ctx },
		// Which user's program connected, for the session's check.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			uid, err := cfg.peerUID(c.LocalAddr(), c.RemoteAddr())
			return context.WithValue(ctx, peerKey{}, peer{uid, err})
		},
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	if ln6 != nil {
		// Every request on [::1] is refused (its Host is not
		// 127.0.0.1:PORT) and told where the view is. This goroutine
		// ends when the server is closed.
		go s.srv.Serve(ln6)
	}
	// This goroutine ends when the server is closed (Close, or ctx done
	// and the goroutine below closes it).
	go func() {
		err := s.srv.Serve(ln)
		cancel()
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.done <- err
	}()
	// This one ends when ctx is done: by the caller, or by Serve's end.
	go func() {
		<-ctx.Done()
		s.srv.Close()
	}()
	return s, nil
}

// listen listens on 127.0.0.1:port, and on [::1] at the same port, so
// that no other program can take [::1]:PORT while the view runs: a
// browser sent to localhost:PORT may try [::1] first. A port of 0 is one
// free at both. When [::1]:port is taken, that is an error for a port
// given; ln6 is nil where the host has no [::1].
func listen(port int) (ln, ln6 net.Listener, err error) {
	for try := 0; ; try++ {
		ln, err = net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return nil, nil, fmt.Errorf("listening on 127.0.0.1:%d: %w", port, err)
		}
		got := ln.Addr().(*net.TCPAddr).Port
		ln6, err = net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(got)))
		switch {
		case err == nil:
			return ln, ln6, nil
		case !errors.Is(err, syscall.EADDRINUSE):
			return ln, nil, nil // no [::1] here
		}
		ln.Close()
		if port != 0 || try == 20 {
			return nil, nil, fmt.Errorf("[::1]:%d is taken by another program, which a browser sent to localhost:%d may reach: choose another port: %w", got, got, err)
		}
	}
}

// URL is the address to open: the view's first page with the token that
// gets a browser its session cookie, once. It is a secret until used.
func (s *Server) URL() string {
	return fmt.Sprintf("%s/?token=%s", s.origin, s.token)
}

// LoggedIn is closed when the URL's token has been exchanged for a
// session; the URL is of no use after that.
func (s *Server) LoggedIn() <-chan struct{} { return s.loggedIn }

// Port is the port the view listens on.
func (s *Server) Port() int { return s.port }

// Wait waits until the view stops (its context done, or Close) and
// returns what stopped it other than that.
func (s *Server) Wait() error {
	err := <-s.done
	s.done <- err
	return err
}

// Close stops the view and ends its connections.
func (s *Server) Close() error {
	s.srv.Close()
	return s.Wait()
}

// Handler is the view's whole HTTP handler, its checks included.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

// securityHeaders are set on every answer, refusals included.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Content-Type-Options":       "nosniff",
	"X-Frame-Options":              "DENY",
	"Referrer-Policy":              "no-referrer",
	"Cache-Control":                "no-store",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
}

// maxForm bounds the body of a POST: a rule's fields.
const maxForm = 64 << 10

// serveHTTP checks, in this order, the Host header, the method, the token
// or session, and for a POST its origin and CSRF token; then it serves the
// page.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range securityHeaders {
		w.Header().Set(k, v)
	}
	if !s.ownHost(r.Host) {
		refuse(w, http.StatusMisdirectedRequest, fmt.Sprintf("host %q is not this server's: open %s/ (not localhost, which may reach another program on [::1]; a page of another site cannot use sbx ui)", r.Host, s.origin))
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		refuse(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if r.URL.Query().Has("token") {
		s.login(w, r)
		return
	}
	session, status, err := s.session(r)
	if err != nil {
		refuse(w, status, err.Error())
		return
	}
	if r.Method == http.MethodPost {
		if !s.sameOrigin(r) {
			refuse(w, http.StatusForbidden, "cross-origin request refused: changes are made from the view's own pages only, in a browser")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		got := r.PostFormValue(csrfField)
		if want := s.csrfToken(session); subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			refuse(w, http.StatusForbidden, "the form's CSRF token is missing or wrong: reload the page and try again")
			return
		}
	}
	r = r.WithContext(withSession(r.Context(), session))
	s.pages.mux.ServeHTTP(w, r)
}

// ownHost reports whether host, a request's Host header, names this
// server: 127.0.0.1:PORT, nothing else. Not localhost: a browser may try
// [::1]:PORT for it first, where another user's program may listen.
func (s *Server) ownHost(host string) bool {
	return host == "127.0.0.1:"+strconv.Itoa(s.port)
}

// sameOrigin reports whether the browser says r comes from one of the
// view's own pages: Sec-Fetch-Site same-origin (with an Origin that is
// the view's, or none, or "null", which is what a browser sends under
// the pages' Referrer-Policy no-referrer), or, from a browser that sends
// no Sec-Fetch-Site, an Origin that is exactly the view's. A request
// with neither header (a replay by a program other than a browser) is
// refused: a browser sends at least one of them with every POST.
func (s *Server) sameOrigin(r *http.Request) bool {
	site, origin := r.Header.Get("Sec-Fetch-Site"), r.Header.Get("Origin")
	if site == "" {
		return origin == s.origin
	}
	return site == "same-origin" && (origin == "" || origin == "null" || origin == s.origin)
}

// login exchanges the token of the printed URL, once, for a new session
// cookie and redirects to the same page without the token. A second use
// is refused, unless it comes with the session the first use made.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if subtle.ConstantTimeCompare([]byte(q.Get("token")), []byte(s.token)) != 1 || r.Method != http.MethodGet {
		refuse(w, http.StatusUnauthorized, "wrong token: open the URL that sbx ui printed")
		return
	}
	q.Del("token")
	back := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	s.mu.Lock()
	used := s.tokenUsed
	s.tokenUsed = true
	s.mu.Unlock()
	if used {
		if _, _, err := s.session(r); err == nil {
			http.Redirect(w, r, back.String(), http.StatusSeeOther)
			return
		}
		refuse(w, http.StatusGone, "this link was used already: its token opens the view once, in one browser. "+
			"Run sbx ui again for a new link (if you did not open it, someone else did: stop that sbx ui)")
		return
	}
	sess := &session{last: s.cfg.now()}
	switch p, ok := r.Context().Value(peerKey{}).(peer); {
	case ok && p.err == nil:
		sess.uid, sess.bound = p.uid, true
	case ok && !errors.Is(p.err, errors.ErrUnsupported):
		// The token is spent: better a new sbx ui than a session that
		// any local user's program could use.
		refuse(w, http.StatusInternalServerError, fmt.Sprintf("cannot tell which user's program opened the URL (%v), so its session could not be kept to that user: run sbx ui again", p.err))
		return
	}
	nonce := randomHex(16)
	s.mu.Lock()
	s.sessions[nonce] = sess
	s.mu.Unlock()
	close(s.loggedIn)
	http.SetCookie(w, &http.Cookie{
		Name:     s.cookie,
		Value:    nonce + "." + s.mac("session:"+nonce),
		Path:     "/",
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, back.String(), http.StatusSeeOther)
}

// session returns the session of r's cookie when the cookie is one this
// server set, its session has not been idle for SessionIdle, and r comes
// from a program of the user whose browser the session is (where the
// system tells); the request counts as the session's last. The error
// says what to do, with the status to answer.
func (s *Server) session(r *http.Request) (string, int, error) {
	noSession := errors.New("no session: open the URL that sbx ui printed (it holds the token)")
	c, err := r.Cookie(s.cookie)
	if err != nil {
		return "", http.StatusUnauthorized, noSession
	}
	nonce, mac, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(s.mac("session:"+nonce))) {
		return "", http.StatusUnauthorized, noSession
	}
	now := s.cfg.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[nonce]
	if !ok {
		return "", http.StatusUnauthorized, noSession
	}
	if now.Sub(sess.last) >= SessionIdle {
		delete(s.sessions, nonce)
		return "", http.StatusUnauthorized, fmt.Errorf("the session expired after %s without a request: run sbx ui again for a new link", SessionIdle)
	}
	if p, _ := r.Context().Value(peerKey{}).(peer); sess.bound && (p.err != nil || p.uid != sess.uid) {
		who := "a program whose user cannot be told"
		if p.err == nil {
			who = "a program of uid " + strconv.FormatUint(uint64(p.uid), 10)
		}
		return "", http.StatusForbidden, fmt.Errorf("this session is the browser's of uid %d; its cookie came from %s: refused", sess.uid, who)
	}
	sess.last = now
	return nonce, 0, nil
}

// csrfField is the name of the forms' CSRF token field.
const csrfField = "csrf"

// csrfToken is the CSRF token of session's forms.
func (s *Server) csrfToken(session string) string { return s.mac("csrf:" + session) }

func (s *Server) mac(msg string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// refuse answers a refusal in plain text.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

type sessionKey struct{}

func withSession(ctx context.Context, session string) context.Context {
	return context.WithValue(ctx, sessionKey{}, session)
}

func sessionOf(ctx context.Context) string {
	s, _ := ctx.Value(sessionKey{}).(string)
	return s
}
