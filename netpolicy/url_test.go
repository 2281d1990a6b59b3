package netpolicy

import (
	"errors"
	"strings"
	"testing"
)

// TestURLHostInFile: a rule's host written as a URL is a ParseError with
// the file and line, saying it is a URL and which host (and ports, when
// the URL's port is not its scheme's default) to write.
func TestURLHostInFile(t *testing.T) {
	tests := []struct {
		host string
		want string
	}{
		{"https://github.com/", `host: "https://github.com/": a URL, not a host; write host: github.com`},
		{"http://GitHub.com", `a URL, not a host; write host: github.com`},
		{"https://github.com:443/x", `a URL, not a host; write host: github.com`},
		{"http://github.com:80", `a URL, not a host; write host: github.com`},
		{"https://github.com:8443/x?y", `a URL, not a host; write host: github.com with ports: [8443]`},
		{"http://user:secret@github.com:8080/", `a URL, not a host; write host: github.com with ports: [8080]`},
		{"https://[2001:db8::1]:8443/", `a URL, not a host; write host: 2001:db8::1 with ports: [8443]`},
		{"https://*.github.com/", `a URL, not a host; write host: *.github.com`},
		{"ssh://git@github.com:22/x", `a URL, not a host; write host: github.com with ports: [22]`},
		{"https:///x", `a URL with no host; write the host alone, e.g. host: example.com`},
	}
	for _, tt := range tests {
		doc := "version: 1\nrules:\n  - host: " + tt.host + "\n    action: allow\n"
		_, err := Parse("policy.yaml", []byte(doc))
		var list ErrorList
		if !errors.As(err, &list) || len(list) != 1 {
			t.Errorf("host %s: got %v, want one ParseError", tt.host, err)
			continue
		}
		pe := list[0]
		if pe.File != "policy.yaml" || pe.Line != 3 {
			t.Errorf("host %s: got %s:%d, want policy.yaml:3", tt.host, pe.File, pe.Line)
		}
		if !strings.Contains(pe.Msg, tt.want) {
			t.Errorf("host %s: got %q, want it to hold %q", tt.host, pe.Msg, tt.want)
		}
		if strings.Contains(pe.Msg, "CIDR") {
			t.Errorf("host %s: got %q, which speaks of CIDRs", tt.host, pe.Msg)
		}
		if !errors.Is(err, ErrInvalidRule) {
			t.Errorf("host %s: got %v, want it to wrap ErrInvalidRule", tt.host, err)
		}
	}
}

// TestURLPatternFlag: a flag pattern written as a URL names the pattern to
// write, with the port only when it is not the scheme's default.
func TestURLPatternFlag(t *testing.T) {
	tests := []struct {
		pattern string
		want    string
	}{
		{"https://github.com/", "--allow https://github.com/ is a URL, not a pattern; write --allow github.com"},
		{"https://github.com:443/", "write --allow github.com"},
		{"https://github.com:8443/", "--allow https://github.com:8443/ is a URL, not a pattern; write --allow github.com:8443"},
		{"http://[2001:db8::1]:8080/", "write --allow [2001:db8::1]:8080"},
		{"http://[2001:db8::1]/", "write --allow 2001:db8::1"},
		{"wss://api.example.com:80/ws", "write --allow api.example.com:80"},
	}
	for _, tt := range tests {
		_, err := FlagPatterns{Allow: []string{tt.pattern}}.Rules()
		var list ErrorList
		if !errors.As(err, &list) || len(list) != 1 {
			t.Errorf("--allow %s: got %v, want one error", tt.pattern, err)
			continue
		}
		if !strings.Contains(list[0].Msg, tt.want) {
			t.Errorf("--allow %s: got %q, want it to hold %q", tt.pattern, list[0].Msg, tt.want)
		}
		if !errors.Is(err, ErrInvalidRule) {
			t.Errorf("--allow %s: got %v, want it to wrap ErrInvalidRule", tt.pattern, err)
		}
		// The pattern it suggests is a valid one.
		var u *URLError
		if _, _, err := ParseFlagPattern(tt.pattern); !errors.As(err, &u) {
			t.Errorf("ParseFlagPattern(%q): got %v, want a *URLError", tt.pattern, err)
		} else if _, err := (FlagPatterns{Allow: []string{u.Pattern()}}).Rules(); err != nil {
			t.Errorf("--allow %s suggests %s, which is refused: %v", tt.pattern, u.Pattern(), err)
		}
	}
}

// TestNotURL: patterns with a colon that are not URLs keep their own
// errors, and valid ones pass.
func TestNotURL(t *testing.T) {
	for _, p := range []string{"github.com:443", "[2001:db8::1]:443", "2001:db8::/32", "*:443"} {
		if _, err := (FlagPatterns{Allow: []string{p}}).Rules(); err != nil {
			t.Errorf("--allow %s: got %v, want no error", p, err)
		}
	}
	if _, _, err := ParseFlagPattern("1http://x"); errors.As(err, new(*URLError)) {
		t.Errorf("1http://x: got a URLError %v; a scheme starts with a letter", err)
	}
}

// TestNormalizeHostURL: a host given as a URL (--mock-llm, --resolve)
// says what the host is.
func TestNormalizeHostURL(t *testing.T) {
	_, err := NormalizeHost("https://api.anthropic.com/v1")
	if err == nil || !strings.Contains(err.Error(), "a URL, not a host; the host is api.anthropic.com") {
		t.Errorf("got %v, want it to say the host is api.anthropic.com", err)
	}
	if !errors.Is(err, ErrInvalidTarget) {
		t.Errorf("got %v, want it to wrap ErrInvalidTarget", err)
	}
}
