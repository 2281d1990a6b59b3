package login

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// PlaceholderPrefix starts the placeholders of a login's refresh token
// and of its id token's signature, which no request carries to a host:
// "sbx-login-<agent>-<what>-<random>". The access token's and an API
// key's are secrets' (secrets.PlaceholderPrefix).
const PlaceholderPrefix = "sbx-login-"

// maxFile bounds a credential file, and a token endpoint's answer.
const maxFile = 64 << 10

// Login is one agent's login kept outside the sandbox. It is safe for
// concurrent use.
type Login struct {
	a     *agent
	token []netpolicy.SecretHost // the token endpoint's hosts and port
	file  []byte                 // the host file as read
	copy  []byte                 // the sandbox's copy

	access *secrets.Secret // the access token, bound to the API hosts
	apiKey *secrets.Secret // Codex's API key; nil when none
	ph     tokens          // the placeholders the copy holds

	host *hostFile // where the refreshed tokens are written; nil: nowhere (Parse)
	now  func() time.Time

	mu         sync.Mutex // serializes refreshes
	real       tokens
	set        *secrets.Set // where the access token's value is rotated
	last       time.Time    // when the last refresh was answered
	lastAnswer []byte       // and its answer to the agent
}

// Endpoints are where a login's tokens go, when not where the agent
// sends them (a stand-in of the agent's service, in a test): each
// HOST[:PORT] (netpolicy.ParseSecretHost's, 443 when no port).
type Endpoints struct {
	// APIHosts take the access token (and an API key).
	APIHosts []string
	// Token is the token endpoint's host, in place of the agent's; its
	// path is the agent's.
	Token string
}

// Parse returns the login of agent (one of Agents) in b, the bytes of
// its credential file, with placeholders of its own; its refreshed
// tokens are kept in memory only (Read's are written back).
func Parse(name string, b []byte) (*Login, error) {
	return ParseAt(name, b, Endpoints{})
}

// ParseAt is Parse with the tokens going to e's hosts where e names
// them, else to the agent's.
func ParseAt(name string, b []byte, e Endpoints) (*Login, error) {
	a := agents[name]
	if a == nil {
		return nil, fmt.Errorf("login %q: want claude or codex", name)
	}
	if len(e.APIHosts) > 0 || e.Token != "" {
		c := *a
		if len(e.APIHosts) > 0 {
			c.apiHosts, c.keyHosts = e.APIHosts, e.APIHosts
		}
		if e.Token != "" {
			c.tokenHosts = []string{e.Token}
		}
		a = &c
	}
	var token []netpolicy.SecretHost
	for _, h := range a.tokenHosts {
		th, err := netpolicy.ParseSecretHost(h)
		if err != nil {
			return nil, fmt.Errorf("login %s: the token endpoint: %w", name, err)
		}
		token = append(token, th)
	}
	t, err := a.parse(b)
	if err != nil {
		return nil, fmt.Errorf("login %s: %w", name, err)
	}
	l := &Login{a: a, token: token, file: b, real: t, now: time.Now}
	allHeaders := []string{"Authorization"}
	if l.access, err = secrets.FromSpec(netpolicy.Secret{Name: a.secretBase + "_ACCESS_TOKEN", Hosts: a.apiHosts, Headers: allHeaders}, t.access); err != nil {
		return nil, fmt.Errorf("login %s: the access token: %w", name, err)
	}
	if t.apiKey != "" {
		if l.apiKey, err = secrets.FromSpec(netpolicy.Secret{Name: a.secretBase + "_API_KEY", Hosts: a.keyHosts, Headers: allHeaders}, t.apiKey); err != nil {
			return nil, fmt.Errorf("login %s: the API key: %w", name, err)
		}
		l.ph.apiKey = l.apiKey.Placeholder()
	}
	l.ph.access = l.access.Placeholder()
	if l.ph.refresh, err = placeholder(name, "refresh"); err != nil {
		return nil, err
	}
	if t.id != "" {
		sig, err := placeholder(name, "id")
		if err != nil {
			return nil, err
		}
		l.ph.id = neuterJWT(t.id, sig)
	}
	if l.copy, err = a.copyOf(b, l.ph); err != nil {
		return nil, fmt.Errorf("login %s: %w", name, err)
	}
	return l, nil
}

// placeholder is a new placeholder of the login's token what.
func placeholder(name, what string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("login %s: making a placeholder: %w", name, err)
	}
	return PlaceholderPrefix + name + "-" + what + "-" + hex.EncodeToString(b[:]), nil
}

// Agent is the login's agent: claude or codex.
func (l *Login) Agent() string { return l.a.name }

// File is where the agent keeps its login, below the home.
func (l *Login) File() string { return l.a.file }

// Copy is the sandbox's copy of the credential file: its shape, its
// expiry, placeholders for every token.
func (l *Login) Copy() []byte { return l.copy }

// Secrets are the login's values that the gateway puts in requests: the
// access token, bound to the agent's API hosts (and Codex's API key, to
// api.openai.com), in the Authorization header only. The gateway's
// secrets.Set must hold them, and Bind be given that Set.
func (l *Login) Secrets() []*secrets.Secret {
	if l.apiKey != nil {
		return []*secrets.Secret{l.access, l.apiKey}
	}
	return []*secrets.Secret{l.access}
}

// Bind gives l the Set that holds its Secrets: a refresh rotates the
// access token's value there.
func (l *Login) Bind(set *secrets.Set) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.set = set
}

// Hosts are the hosts the login needs reached: the API hosts, then the
// token endpoint's (each the agent's versions have used).
func (l *Login) Hosts() []string {
	h := append([]string(nil), l.a.apiHosts...)
	if l.apiKey != nil {
		h = append(h, l.a.keyHosts...)
	}
	return append(h, l.a.tokenHosts...)
}

// TokenEndpoint reports whether host (normalized) on port is the
// login's token endpoint's host, whose requests the gateway inspects so
// that a refresh goes through Refresher.
func (l *Login) TokenEndpoint(host string, port uint16) bool {
	for _, th := range l.token {
		if th.Match(host, port) {
			return true
		}
	}
	return false
}

// String names the login, never a token.
func (l *Login) String() string { return "login " + l.a.name }
