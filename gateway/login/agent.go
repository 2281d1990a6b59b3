package login

import (
	"encoding/json"
	"fmt"
	"strings"
)

// An agent is one CLI's login: where its file is, how its tokens sit in
// it, where they go and where they are refreshed.
type agent struct {
	name       string
	file       string   // below the home, with slashes
	apiHosts   []string // where the access token goes
	keyHosts   []string // where an API key in the file goes (Codex)
	tokenHosts []string // the token endpoint's hosts (the agent's versions differ)
	tokenPath  string   // and path
	clientID   string   // the CLI's OAuth client id, which its refresh names
	secretBase string   // the secrets' names start with it
}

// agents are the logins sbx keeps outside, by name.
var agents = map[string]*agent{
	"claude": {
		name: "claude", file: ".claude/.credentials.json",
		apiHosts:   []string{"api.anthropic.com"},
		tokenHosts: []string{"platform.claude.com", "console.anthropic.com"}, tokenPath: "/v1/oauth/token",
		clientID:   "9d1c250a-e61b-44d9-88ed-5944d1962f5e",
		secretBase: "CLAUDE",
	},
	"codex": {
		name: "codex", file: ".codex/auth.json",
		apiHosts:   []string{"chatgpt.com"},
		keyHosts:   []string{"api.openai.com"},
		tokenHosts: []string{"auth.openai.com"}, tokenPath: "/oauth/token",
		clientID:   "app_EMoamEEZ73f0CkXaXp7hrann",
		secretBase: "CODEX",
	},
}

// Agents are the names Read and Parse take, sorted.
func Agents() []string { return []string{"claude", "codex"} }

// Hosts are the hosts agent's login goes to: its API hosts (the access
// token's), then its token endpoint's (each the agent's versions have
// used); none for a name that is not one of Agents.
func Hosts(name string) []string {
	a := agents[name]
	if a == nil {
		return nil
	}
	return append(append([]string(nil), a.apiHosts...), a.tokenHosts...)
}

// File is where agent keeps its login, below the home, with slashes; ""
// for a name that is not one of Agents.
func File(name string) string {
	if a := agents[name]; a != nil {
		return a.file
	}
	return ""
}

// tokens are the credentials of a login file.
type tokens struct {
	access  string
	refresh string
	id      string // Codex's id token (a JWT); "" for Claude
	apiKey  string // Codex's OPENAI_API_KEY; "" when none
}

// parse reads the tokens of the agent's file b. A file without an
// access and a refresh token is no subscription login.
func (a *agent) parse(b []byte) (tokens, error) {
	var t tokens
	switch a.name {
	case "claude":
		var f struct {
			OAuth *struct {
				AccessToken  string `json:"accessToken"`
				RefreshToken string `json:"refreshToken"`
			} `json:"claudeAiOauth"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return t, fmt.Errorf("not Claude Code's credentials file: %w", err)
		}
		if f.OAuth != nil {
			t.access, t.refresh = f.OAuth.AccessToken, f.OAuth.RefreshToken
		}
	case "codex":
		var f struct {
			APIKey *string `json:"OPENAI_API_KEY"`
			Tokens *struct {
				ID      string `json:"id_token"`
				Access  string `json:"access_token"`
				Refresh string `json:"refresh_token"`
			} `json:"tokens"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return t, fmt.Errorf("not Codex's auth.json: %w", err)
		}
		if f.APIKey != nil {
			t.apiKey = *f.APIKey
		}
		if f.Tokens != nil {
			t.access, t.refresh, t.id = f.Tokens.Access, f.Tokens.Refresh, f.Tokens.ID
		}
	}
	if t.access == "" || t.refresh == "" {
		return t, fmt.Errorf("holds no subscription login (no access and refresh token): log in with %s on the host first", a.name)
	}
	return t, nil
}

// copyOf is the file b with the tokens of t replaced by the placeholders
// of p, in the same shape, every other credential the file holds left
// out (Claude Code's MCP logins): the sandbox's copy.
func (a *agent) copyOf(b []byte, p tokens) ([]byte, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	out := map[string]any{}
	switch a.name {
	case "claude":
		var o map[string]any
		if err := unmarshalNumbers(f["claudeAiOauth"], &o); err != nil {
			return nil, err
		}
		o["accessToken"], o["refreshToken"] = p.access, p.refresh
		out["claudeAiOauth"] = o
	case "codex":
		var tk map[string]any
		if err := unmarshalNumbers(f["tokens"], &tk); err != nil {
			return nil, err
		}
		tk["access_token"], tk["refresh_token"], tk["id_token"] = p.access, p.refresh, p.id
		out["tokens"] = tk
		out["OPENAI_API_KEY"] = nil
		if p.apiKey != "" {
			out["OPENAI_API_KEY"] = p.apiKey
		}
		for _, k := range []string{"last_refresh", "auth_mode"} {
			if v, ok := f[k]; ok {
				out[k] = v
			}
		}
	}
	return json.MarshalIndent(out, "", "  ")
}

// unmarshalNumbers is json.Unmarshal keeping numbers as they were
// written (an expiry in milliseconds).
func unmarshalNumbers(b []byte, v any) error {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	return d.Decode(v)
}

// neuterJWT is the JWT tok with its signature replaced by ph: its claims
// are still read by the agent, but it proves nothing to anyone. A token
// that is not a JWT is ph.
func neuterJWT(tok, ph string) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return ph
	}
	return parts[0] + "." + parts[1] + "." + ph
}
