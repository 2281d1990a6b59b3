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
	// running, stopping), or "ended".
	Status string
	// Command is the sandbox's command; nil for an ended sandbox.
	Command []string
	// Time is when it was created, or when its log was last written for
	// an ended one.
	Time time.Time
	// HasLog says a decision log of it is kept, which the audit page
	// reads.
	HasLog bool
}

// StatusEnded is the Status of a sandbox that no longer runs.
const StatusEnded = "ended"

// Running reports whether the sandbox runs (its API may answer).
func (s Sandbox) Running() bool { return s.Status != StatusEnded }

// Config configures Start. Sandboxes is required.
type Config struct {
	// Sandboxes is where the sandboxes are found.
	Sandboxes Sandboxes
	// Port is the port to listen on at 127.0.0.1; 0 takes a free one.
	Port int
	// Logger receives operational messages; nil discards them.
	Logger *slog.Logger
}

// Server is a running view made by Start. Close stops it.
type Server struct {
	cfg    Config
	ln     net.Listener
	srv    *http.Server
	port   int
	token  string // the printed URL's
	key    []byte // signs session cookies and derives their CSRF tokens
	cookie string // the session cookie's name, which holds the port
	origin *http.CrossOriginProtection
	pages  *pages
	done   chan error
}

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
	s := &Server{cfg: cfg, token: randomHex(32), key: []byte(randomHex(32)), done: make(chan error, 1)}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.Port)))
	if err != nil {
		return nil, fmt.Errorf("listening on 127.0.0.1:%d: %w", cfg.Port, err)
	}
	s.ln = ln
	s.port = ln.Addr().(*net.TCPAddr).Port
	s.cookie = "sbx_ui_" + strconv.Itoa(s.port)
	s.origin = http.NewCrossOriginProtection()
	s.origin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse(w, http.StatusForbidden, "cross-origin request refused: changes are made from the view's own pages only")
	}))
	s.pages = newPages(cfg.Sandboxes, cfg.Logger, s.csrfToken)
	ctx, cancel := context.WithCancel(ctx)
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// Handlers' contexts end when the view stops, so that live
		// streams end with it.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
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

// URL is the address to open: the view's first page with the token that
// gets a browser its session cookie. It is a secret.
func (s *Server) URL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/?token=%s", s.port, s.token)
}

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
		refuse(w, http.StatusMisdirectedRequest, fmt.Sprintf("host %q is not this server's: open http://127.0.0.1:%d/ (a page of another site cannot use sbx ui)", r.Host, s.port))
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
	session, ok := s.session(r)
	if !ok {
		refuse(w, http.StatusUnauthorized, "no session: open the URL that sbx ui printed (it holds the token)")
		return
	}
	if r.Method == http.MethodPost {
		if err := s.origin.Check(r); err != nil {
			refuse(w, http.StatusForbidden, "cross-origin request refused: changes are made from the view's own pages only")
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
// server: 127.0.0.1:PORT or localhost:PORT, nothing else.
func (s *Server) ownHost(host string) bool {
	h, p, err := net.SplitHostPort(host)
	if err != nil || p != strconv.Itoa(s.port) {
		return false
	}
	return h == "127.0.0.1" || strings.EqualFold(h, "localhost")
}

// login checks the token of the printed URL; when it is right it sets a
// new session cookie and redirects to the same page without the token.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if subtle.ConstantTimeCompare([]byte(q.Get("token")), []byte(s.token)) != 1 || r.Method == http.MethodPost {
		refuse(w, http.StatusUnauthorized, "wrong token: open the URL that sbx ui printed")
		return
	}
	nonce := randomHex(16)
	http.SetCookie(w, &http.Cookie{
		Name:     s.cookie,
		Value:    nonce + "." + s.mac("session:"+nonce),
		Path:     "/",
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	q.Del("token")
	u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// session returns the session of r's cookie when the cookie is one this
// server set.
func (s *Server) session(r *http.Request) (string, bool) {
	c, err := r.Cookie(s.cookie)
	if err != nil {
		return "", false
	}
	nonce, mac, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(s.mac("session:"+nonce))) {
		return "", false
	}
	return nonce, true
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
