package mockllm

import (
	"regexp"
	"strings"
	"sync"
)

// Placeholders that NormalizeUser puts in place of volatile text.
const (
	placeholderReminder  = "<system-reminder/>"
	placeholderContext   = "<session_context/>"
	placeholderTemp      = "<tmp>"
	placeholderTimestamp = "<timestamp>"
	placeholderUUID      = "<uuid>"
	placeholderDate      = "<date>"
	placeholderTime      = "<time>"
	placeholderHex       = "<hex>"
)

// NormalizeUser returns a user message with what changes from one run of
// an agent to the next replaced by placeholders, so that a turn recorded
// one day matches the same request the next:
//
//   - <system-reminder>...</system-reminder> blocks (Claude Code's) become
//     <system-reminder/>, and <session_context>...</session_context>
//     blocks (the Gemini CLI's) <session_context/>;
//   - temporary paths, /tmp/..., /var/tmp/... and macOS's /var/folders/...
//     (also as /private/...), at the start of a path and up to a space, a
//     quote or a bracket, become <tmp>;
//   - runs of white space become one space, and the ends are trimmed;
//   - then, word by word: ISO 8601 timestamps become <timestamp>, UUIDs
//     <uuid>, dates (2025-10-07, 10/7/2025, "Tuesday, October 7, 2025",
//     "7 Oct", a weekday next to the date going with it) <date>, times of
//     day (14:05, 2:05 PM PDT) <time>, and 7 or more hex digits with at
//     least one digit among them (commit hashes, request ids, Unix times)
//     <hex>.
//
// Normalizing a normalized text changes nothing. It takes time linear in
// the length of s.
func NormalizeUser(s string) string {
	s = replaceBlocks(s, "<system-reminder>", "</system-reminder>", placeholderReminder)
	s = replaceBlocks(s, "<session_context>", "</session_context>", placeholderContext)
	s = replaceTempPaths(s)
	s = strings.Join(strings.Fields(s), " ")
	return replaceWords(s)
}

// replaceBlocks replaces each block from open to end by placeholder; an
// unclosed one stays.
func replaceBlocks(s, open, end, placeholder string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, open)
		if i < 0 {
			break
		}
		j := strings.Index(s[i+len(open):], end)
		if j < 0 {
			break
		}
		b.WriteString(s[:i])
		b.WriteString(placeholder)
		s = s[i+len(open)+j+len(end):]
	}
	if b.Len() == 0 {
		return s
	}
	b.WriteString(s)
	return b.String()
}

// tempDirs start the temporary paths: "/var/tmp/" and "/private/..."
// are found by their "/tmp/" or "/var/folders/".
var tempDirs = []string{"/tmp/", "/var/folders/"}

// replaceTempPaths replaces temporary paths by placeholderTemp.
func replaceTempPaths(s string) string {
	var b strings.Builder
	done := 0 // s[:done] is in b, or unchanged when b is empty
	// next holds where each of tempDirs is next found at or after from,
	// -1 for nowhere, so that each is searched for once over s.
	next := make([]int, len(tempDirs))
	for k, dir := range tempDirs {
		next[k] = strings.Index(s, dir)
	}
	for from := 0; ; {
		i, n := -1, 0
		for k, dir := range tempDirs {
			if next[k] >= 0 && next[k] < from {
				if next[k] = strings.Index(s[from:], dir); next[k] >= 0 {
					next[k] += from
				}
			}
			if next[k] >= 0 && (i < 0 || next[k] < i) {
				i, n = next[k], len(dir)
			}
		}
		if i < 0 {
			break
		}
		start := i
		if n == len("/tmp/") && start >= len("/var") && s[start-len("/var"):start] == "/var" {
			start -= len("/var")
		}
		if start >= len("/private") && s[start-len("/private"):start] == "/private" {
			start -= len("/private")
		}
		if start > 0 && isPathByte(s[start-1]) {
			from = i + 1 // inside another path: /home/me/tmp/x
			continue
		}
		end := i + n
		for end < len(s) && !strings.ContainsRune(" \t\n\v\f\r\"'`<>()[]{},;", rune(s[end])) {
			end++
		}
		b.WriteString(s[done:start])
		b.WriteString(placeholderTemp)
		done, from = end, end
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// startsTempDir reports whether a temporary path starts at s[i:].
func startsTempDir(s string, i int) bool {
	for _, dir := range append(tempDirs, "/var/tmp/", "/private/") {
		if strings.HasPrefix(s[i:], dir) {
			return true
		}
	}
	return false
}

// isPathByte reports whether c may come before a path's start inside a
// longer path or word.
func isPathByte(c byte) bool {
	return isWordByte(c) || c == '.' || c == '/' || c == '~' || c == '-'
}

func isWordByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
}

func isHexByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// The names of weekdays and months, capitalized as in dates ("you may 3
// times" is not one).
const (
	weekdays = `Mon|Tue|Tues|Wed|Thu|Thur|Thurs|Fri|Sat|Sun|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday`
	months   = `Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec|January|February|March|April|May|June|July|August|September|October|November|December`
)

// The patterns replaceWords tries where a word starts; the text has one
// space between words. Each is anchored, small and bounded in length (at
// most maxWordMatch bytes), so that trying one costs little. Each is
// compiled when first tried (pattern), not at the start of every sbx
// process, most of which never normalize a message.
var (
	// ISO 8601 and RFC 3339 timestamps: a date, T or a space, a time, an
	// optional fraction and zone.
	reTimestamp = pattern(`^\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:Z\b|[+-]\d{2}:?\d{2}\b)?`)
	// Dates in digits: 2025-10-07, 2025/10/07, 10/7/2025, 7.10.2025.
	reNumericDate = pattern(`^(?:\d{4}[-/]\d{1,2}[-/]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{4})\b`)
	// Dates with the month named: "October 7, 2025", "Oct. 7th"; "7 Oct
	// 2025", "7th of October".
	reMonthDay = pattern(`^(?:` + months + `)\.? \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?\b`)
	reDayMonth = pattern(`^\d{1,2}(?:st|nd|rd|th)? (?:of )?(?:` + months + `)\b\.?(?:,? \d{4}\b)?`)
	// A weekday before a date, and after one, changes with it and goes
	// with it.
	reWeekdayBefore = pattern(`^(?:` + weekdays + `)\b\.?,? ?`)
	reWeekdayAfter  = pattern(`^,? ?(?:\((?:` + weekdays + `)\)|(?:` + weekdays + `)\b)`)
	// Times of day: 14:05, 14:05:09.123, 2:05 PM, with a zone when one
	// follows (Z, UTC, +02:00, PDT).
	reTime = pattern(`^\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?\b(?: ?[AaPp]\.?[Mm]\b\.?)?(?: ?(?:Z|UTC|GMT|[+-]\d{2}:?\d{2}|[A-Z]{2,4}T)\b)?`)
)

// pattern returns expr's regular expression, compiled on the first call.
func pattern(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// maxWordMatch bounds what the patterns of replaceWords match.
const maxWordMatch = 64

// minHexID is the fewest hex digits NormalizeUser takes for an id.
const minHexID = 7

// replaceWords replaces timestamps, UUIDs, dates, times and hex ids, as
// NormalizeUser says, trying the patterns only where a word starts with a
// digit, a capital letter (a weekday or a month), a hex letter or '<' (a
// placeholder, which a weekday may follow).
func replaceWords(s string) string {
	var b strings.Builder
	done := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '<' && (i > 0 && isWordByte(s[i-1]) || !isHexByte(c) && !(c >= 'A' && c <= 'Z')) {
			continue
		}
		n, with := wordAt(s, i)
		if n == 0 || startsTempDir(s, i+n) {
			// Before a temporary path, which the word makes part of a
			// longer one ("x2025-10-07/tmp/y"), the word stays: its
			// placeholder would make the path one of ours.
			continue
		}
		b.WriteString(s[done:i])
		b.WriteString(with)
		done = i + n
		i = done - 1
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// matchAt returns the length of what re matches at s[i:], or 0.
func matchAt(re func() *regexp.Regexp, s string, i int) int {
	w := s[i:min(len(s), i+maxWordMatch)]
	m := re().FindStringIndex(w)
	if m == nil || m[1] == len(w) && len(w) == maxWordMatch {
		return 0 // a bound reached: not one of ours
	}
	return m[1]
}

// namePrefixes are the first three letters of the weekdays and months.
const namePrefixes = "|Mon|Tue|Wed|Thu|Fri|Sat|Sun|Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec|"

// named reports whether s[i:] may start with a weekday or a month.
func named(s string, i int) bool {
	return len(s)-i >= 3 && s[i] >= 'A' && s[i] <= 'Z' && strings.Contains(namePrefixes, "|"+s[i:i+3]+"|")
}

// wordAt returns the length of the volatile text at s[i:] and its
// placeholder, or 0.
func wordAt(s string, i int) (int, string) {
	if n, with := dateAt(s, i); n > 0 {
		return n, with
	}
	if isUUIDAt(s, i) {
		return 36, placeholderUUID
	}
	if c := s[i]; c >= '0' && c <= '9' && (len(s)-i > 2 && s[i+1] == ':' || len(s)-i > 3 && s[i+2] == ':') {
		if n := matchAt(reTime, s, i); n > 0 {
			return n, placeholderTime
		}
	}
	j, digit := i, false
	for j < len(s) && isHexByte(s[j]) {
		digit = digit || s[j] <= '9'
		j++
	}
	if digit && j-i >= minHexID && (j == len(s) || !isWordByte(s[j])) {
		return j - i, placeholderHex
	}
	return 0, ""
}

// dateAt returns the length of a timestamp or a date at s[i:], with a
// weekday before or after it, and its placeholder, or 0. A placeholder
// already there counts, so that a weekday next to it goes too.
func dateAt(s string, i int) (int, string) {
	j := i
	if named(s, i) {
		j += matchAt(reWeekdayBefore, s, i)
	}
	if j >= len(s) {
		return 0, ""
	}
	n, with := 0, ""
	switch c := s[j]; {
	case strings.HasPrefix(s[j:], placeholderDate):
		n, with = len(placeholderDate), placeholderDate
	case strings.HasPrefix(s[j:], placeholderTimestamp):
		n, with = len(placeholderTimestamp), placeholderTimestamp
	case c >= '0' && c <= '9':
		if n = matchAt(reTimestamp, s, j); n > 0 {
			with = placeholderTimestamp
		} else if n = matchAt(reNumericDate, s, j); n > 0 {
			with = placeholderDate
		} else if n = matchAt(reDayMonth, s, j); n > 0 {
			with = placeholderDate
		}
	case named(s, j):
		if n = matchAt(reMonthDay, s, j); n > 0 {
			with = placeholderDate
		}
	}
	if n == 0 {
		return 0, ""
	}
	end := j + n
	if end < len(s) && (s[end] == ',' || s[end] == ' ') {
		end += matchAt(reWeekdayAfter, s, end)
	}
	if end == i+n && s[i] == '<' {
		return 0, "" // a placeholder alone stays as it is
	}
	return end - i, with
}

// isUUIDAt reports whether a UUID, 8-4-4-4-12 hex digits, is at s[i:],
// ending a word.
func isUUIDAt(s string, i int) bool {
	const n = 36
	if len(s)-i < n || len(s)-i > n && isWordByte(s[i+n]) {
		return false
	}
	for k := range n {
		c := s[i+k]
		if k == 8 || k == 13 || k == 18 || k == 23 {
			if c != '-' {
				return false
			}
		} else if !isHexByte(c) {
			return false
		}
	}
	return true
}
