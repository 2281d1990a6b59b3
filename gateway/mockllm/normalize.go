package mockllm

import (
	"regexp"
	"strings"
)

// Placeholders that NormalizeUser puts in place of volatile text.
const (
	placeholderReminder  = "<system-reminder/>"
	placeholderTemp      = "<tmp>"
	placeholderTimestamp = "<timestamp>"
	placeholderUUID      = "<uuid>"
	placeholderDate      = "<date>"
	placeholderTime      = "<time>"
	placeholderHex       = "<hex>"
)

// volatile are the patterns NormalizeUser replaces, in the order it
// replaces them: a later pattern sees the placeholders of earlier ones
// (a temporary path's UUID goes with the path; a weekday next to a date
// goes with the date). with is a regexp.Expand template. No pattern
// matches a placeholder, so that normalizing twice changes nothing.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	// An agent's system reminders (Claude Code's carry the date, the
	// working directory, the files open): the whole block.
	{regexp.MustCompile(`(?s)<system-reminder>.*?</system-reminder>`), placeholderReminder},
	// Temporary paths, /tmp/... and /var/tmp/..., and macOS's
	// /var/folders/... (also seen as /private/var/...), at the start of a
	// path (not /home/me/tmp/x), up to a space, a quote or a bracket.
	{regexp.MustCompile("(^|[^\\w./~-])(?:/private)?(?:/tmp|/var/tmp|/var/folders)/[^\\s\"'`<>()\\[\\]{},;]*"), "${1}" + placeholderTemp},
	// ISO 8601 and RFC 3339 timestamps: a date, T or a space, a time, an
	// optional fraction and zone.
	{regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z\b|[+-]\d{2}:?\d{2}\b)?`), placeholderTimestamp},
	// UUIDs, any version, either case.
	{regexp.MustCompile(`\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b`), placeholderUUID},
	// Dates in digits: 2025-10-07, 2025/10/07, 10/7/2025, 7.10.2025.
	{regexp.MustCompile(`\b(?:\d{4}[-/]\d{1,2}[-/]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{4})\b`), placeholderDate},
	// Dates with the month named: "October 7, 2025", "Oct 7th", "7 Oct
	// 2025", "the 7th of October".
	{regexp.MustCompile(`\b(?:(?:` + months + `)\.?\s+\d{1,2}(?:st|nd|rd|th)?(?:,?\s+\d{4})?|\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:` + months + `)\.?(?:,?\s+\d{4})?)\b`), placeholderDate},
	// A weekday next to a date changes with it: "Tuesday, <date>",
	// "<date> (Tuesday)".
	{regexp.MustCompile(`\b(?:` + weekdays + `)\b\.?,?\s*(<date>|<timestamp>)`), "$1"},
	{regexp.MustCompile(`(<date>|<timestamp>),?\s*(?:\((?:` + weekdays + `)\)|(?:` + weekdays + `)\b)`), "$1"},
	// Times of day: 14:05, 14:05:09.123, 2:05 PM, with a zone when one
	// follows (Z, UTC, +02:00, PDT).
	{regexp.MustCompile(`\b\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\b(?:\s?[AaPp]\.?[Mm]\b\.?)?(?:\s?(?:Z|UTC|GMT|[+-]\d{2}:?\d{2}|[A-Z]{2,4}T)\b)?`), placeholderTime},
	// Hex ids, such as commit hashes and request ids, and long numbers,
	// such as Unix times: 7 or more hex digits, at least one of them a
	// digit (so that words such as "defaced" stay).
	{regexp.MustCompile(`\b[0-9a-fA-F]*[0-9][0-9a-fA-F]*\b`), placeholderHex},
}

// The names of weekdays and months, capitalized as in dates ("you may 3
// times" is not one).
const (
	weekdays = `Mon|Tue|Tues|Wed|Thu|Thur|Thurs|Fri|Sat|Sun|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday`
	months   = `Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec|January|February|March|April|May|June|July|August|September|October|November|December`
)

// minHexID is the fewest hex digits NormalizeUser takes for an id.
const minHexID = 7

// spaces are runs of white space, which NormalizeUser makes one space.
var spaces = regexp.MustCompile(`\s+`)

// NormalizeUser returns a user message with what changes from one run of
// an agent to the next replaced by placeholders, so that a turn recorded
// one day matches the same request the next: <system-reminder> blocks
// become <system-reminder/>, temporary paths (/tmp/..., /var/folders/...)
// <tmp>, ISO timestamps <timestamp>, UUIDs <uuid>, dates <date>, times of
// day <time>, and hex ids of 7 or more digits with both digits and
// letters <hex>; runs of white space become one space, and the ends are
// trimmed. Normalizing a normalized text changes nothing.
func NormalizeUser(s string) string {
	for _, v := range volatile {
		if v.with == placeholderHex {
			s = v.re.ReplaceAllStringFunc(s, func(m string) string {
				if len(m) < minHexID {
					return m
				}
				return placeholderHex
			})
			continue
		}
		s = v.re.ReplaceAllString(s, v.with)
	}
	return strings.TrimSpace(spaces.ReplaceAllLiteralString(s, " "))
}
