// Package audit answers, from decision logs, the questions of an audit or
// a security review (docs/audit.md): what did the sandbox reach, is that
// what it should reach, and what does this version reach that the last one
// did not.
//
// Summary reads records into a Report, streaming and in bounded memory
// (Limits): one row per target (host, port), per DNS name, per bypass
// destination and per process, a timeline and the totals. Whatever goes
// over a limit is counted, and the report says so. A record that stands
// for many (a bypass record's packets, the refusals by a per-client cap
// the gateway folds into one record, with count and cap) counts as all of
// them, and a refusal by a cap is reported as the gateway's limit, not a
// policy block: Suggest writes no rule for it. A log the gateway left
// records out of (dropped records), whose seqs skip records no dropped
// record counts, or whose last line was cut short, is reported as
// incomplete. The counts do not depend on the order of the
// records, so logs are merged by reading them one after the other; when a
// cap is reached, what came first is kept (see Summary).
//
// Expect replays every attempt of the logs against a policy with Replay,
// which decides with netpolicy's Verdict and DecideHost, the code the
// gateway decides with, and replays the address guard (netpolicy's
// GuardAddr) on the addresses a refusal's record names: a CI gate for
// "this plugin reaches only what we reviewed". Suggest writes the policy that allows exactly what a report
// saw, checked to compile and to pass Expect of the same logs. DiffReports
// lists what a new run reaches that an old one did not.
//
// WriteReport writes a report as text, JSON, markdown or one
// self-contained HTML file (no script, no fetch, its charts inline SVG).
// Every string in a log came from the sandbox and is treated as hostile:
// control characters are replaced in text, markup is escaped in markdown
// and HTML, and a suggested policy's comments stay on their lines.
package audit
