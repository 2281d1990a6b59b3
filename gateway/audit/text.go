package audit

import (
	"strconv"
	"unicode/utf8"
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
