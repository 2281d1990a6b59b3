package audit

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/escape"
)

// Bounds of the strings a Summary keeps from a log, so that a log of huge
// strings is read in bounded memory.
const (
	// maxHostString bounds a host, a DNS name and a bypass destination: a
	// valid host name has at most 253 bytes, so a longer one is invalid
	// and kept as a prefix and a marker of its length.
	maxHostString = 253
	// maxPathString bounds a path: the gateway logs at most
	// maxLoggedPath bytes and "...".
	maxPathString = maxLoggedPath + 3
	// maxShortString bounds the other strings: kinds, methods, rules,
	// protocols, process names and executables, sandbox ids, policy
	// changes and reasons.
	maxShortString = 256
)

// clipRecord returns a copy of r whose strings are cut to the bounds above:
// its host as clipString cuts it (so that a cut host is never a valid
// one), its path as the gateway cuts a long one (clipPath), the rest to
// maxShortString; and whose port is 0 when it is not one (negative, or
// over 65535), which is as invalid.
func clipRecord(r *decisionlog.Record) decisionlog.Record {
	c := *r
	if len(c.Host) > maxHostString {
		c.Host = clipString(c.Host, maxHostString)
	}
	c.Path = clipPath(c.Path)
	if c.Port < 0 || c.Port > 65535 {
		c.Port = 0 // not a port: an invalid target, as port 0 is
	}
	for _, f := range [...]*string{&c.ID, &c.Event, &c.Sandbox, &c.Client, &c.Kind, &c.Method, &c.Action, &c.Rule,
		&c.Reason, &c.Upstream, &c.Error, &c.Change, &c.Proto, &c.Comm, &c.Exe} {
		if len(*f) > maxShortString {
			*f = clipString(*f, maxShortString)
		}
	}
	return c
}

// clipPath cuts a path longer than maxPathString as the gateway cuts one
// longer than maxLoggedPath: to at most that many bytes (at a character
// boundary) and "...". pathCut reports true of the result.
func clipPath(p string) string {
	if len(p) <= maxPathString {
		return p
	}
	cut := maxLoggedPath
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return p[:cut] + "..." + strings.Repeat(".", maxLoggedPath-cut)
}

// clipString returns s when it has at most n bytes, else its first bytes
// (cut at a character boundary) and a marker that says how long s was,
// "…(N bytes)": the result has at most n bytes plus the marker.
func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// visible shows a string from the log as what it holds, in every output
// of sbx audit (text, markdown, HTML, and a suggested policy's comments):
// it is escape.Text, sbx's one escaping function for text, so that a
// string cannot drive a terminal, pose as another, break a table or a
// page's layout, or end a YAML comment.
func visible(s string) string { return escape.Text(s) }
