package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// Formats of a report, for WriteReport.
const (
	FormatText     = "text"
	FormatJSON     = "json"
	FormatMarkdown = "markdown"
	FormatHTML     = "html"
)

// Formats lists the formats WriteReport takes.
var Formats = []string{FormatText, FormatJSON, FormatMarkdown, FormatHTML}

// WriteReport writes rep in the given format.
func WriteReport(w io.Writer, rep *Report, format string) error {
	switch format {
	case FormatJSON:
		return writeJSON(w, rep)
	case FormatMarkdown:
		return writeMarkdown(w, rep)
	case FormatHTML:
		return WriteHTML(w, rep)
	case FormatText:
		return writeText(w, rep)
	}
	return fmt.Errorf("unknown format %q: use one of %s", format, strings.Join(Formats, ", "))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// SummaryLine is the report in one line.
func (r *Report) SummaryLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s at %s: %s (%d allowed, %d blocked, %d intercepted)",
		plural(r.Records, "record", "records"), plural(uint64(len(r.Targets)), "target", "targets"),
		plural(r.Requests.Total(), "request", "requests"), r.Requests.Allowed, r.Requests.Blocked, r.Requests.Intercepted)
	fmt.Fprintf(&b, ", %s (%d blocked)", plural(r.DNS.Total(), "DNS query", "DNS queries"), r.DNS.Blocked)
	fmt.Fprintf(&b, ", %s around the gateway", plural(r.BypassPackets, "packet", "packets"))
	fmt.Fprintf(&b, ", %s out, %s in", byteSize(r.BytesOut), byteSize(r.BytesIn))
	return b.String()
}

// span says when the report's records were written.
func (r *Report) span() string {
	if r.First.IsZero() {
		return "no times"
	}
	const layout = "2006-01-02 15:04:05Z07:00"
	return fmt.Sprintf("%s to %s (%s)", r.First.Format(layout), r.Last.Format(layout), r.Last.Sub(r.First).Round(time.Millisecond))
}

// warnings are what a reader must know before trusting the counts.
func (r *Report) warnings() []string {
	var ws []string
	if r.Dropped > 0 {
		ws = append(ws, fmt.Sprintf("the gateway left at least %d records out of these logs (over its log budget, or reports of refused packets it lost): the counts are low, and what they were is not known", r.Dropped))
	}
	ws = append(ws, r.notices()...)
	o := r.Overflow
	if o.Targets+o.DNSNames+o.Bypass+o.Processes > 0 {
		ws = append(ws, fmt.Sprintf("more targets than sbx audit keeps apart: %d attempts, %d DNS queries, %d packets and %d process records are in the totals only", o.Targets, o.DNSNames, o.Bypass, o.Processes))
	}
	if o.Paths > 0 {
		ws = append(ws, fmt.Sprintf("%d requests had paths beyond the %s sbx audit keeps", o.Paths, "200 000"))
	}
	return ws
}

// notices are the warnings besides dropped records and overflow, which
// the HTML report shows in a box of their own.
func (r *Report) notices() []string {
	ws := slices.Clone(r.Truncated)
	ws = append(ws, r.Gaps...)
	if len(r.GuardAddrs) > 0 {
		ws = append(ws, r.guardText())
	}
	ws = append(ws, r.capTexts()...)
	if len(r.Unknown) > 0 {
		ws = append(ws, r.unknownText()+": they are not in the tables below; upgrade sbx to read them")
	}
	if r.ClosedByTLSCheck > 0 {
		ws = append(ws, fmt.Sprintf("the gateway closed %s after opening them, since their first bytes were a TLS ClientHello for another host than the target (sni mismatch) or one it could not parse: each is counted allowed when decided and blocked (rule invalid) when closed, and no policy can allow it", plural(r.ClosedByTLSCheck, "tunnel", "tunnels")))
	}
	return ws
}

// guardText says which addresses the address guard refused, and how to
// exempt them.
func (r *Report) guardText() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the address guard refused %s that the targets' names resolved to, which a policy can exempt: ", plural(uint64(len(r.GuardAddrs))+r.Overflow.GuardAddrs, "address", "addresses"))
	for i, g := range r.GuardAddrs[:min(len(r.GuardAddrs), 5)] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s, for %s)", g.Addr, g.Class, clip(visible(g.Host), maxWideCell))
	}
	if len(r.GuardAddrs) > 5 {
		fmt.Fprintf(&b, " and %d more", len(r.GuardAddrs)-5)
	}
	b.WriteString("; if they are meant (a mirror, a lab network), allow_private (--allow-private ADDR/32) exempts them, and sbx audit --suggest writes it")
	return b.String()
}

// capTexts say how many refusals each per-client cap of the gateway made,
// and that they are not the policy's.
func (r *Report) capTexts() []string {
	var ws []string
	for _, name := range slices.Sorted(maps.Keys(r.Capped)) {
		n := r.Capped[name]
		switch name {
		case decisionlog.CapConns:
			ws = append(ws, fmt.Sprintf("the per-client connection cap (%s) refused %s before any request: the sandbox had as many open as it may; a limit of the gateway, not a policy block, so no rule lifts it", name, plural(n, "connection", "connections")))
		case decisionlog.CapTunnels:
			ws = append(ws, fmt.Sprintf("the per-client tunnel cap (%s) refused %s (CONNECT or captured connections): the sandbox had as many tunnels open as it may; a limit of the gateway, not a policy block, so no rule lifts it (in the targets as rule \"cap %s\")", name, plural(n, "tunnel", "tunnels"), name))
		default:
			ws = append(ws, fmt.Sprintf("a per-client cap this sbx audit does not know (%s) refused %d times: a limit of the gateway, not a policy block", clip(visible(name), maxWideCell), n))
		}
	}
	return ws
}

// unknownText says how many records of which kinds and events this sbx
// audit does not know.
func (r *Report) unknownText() string {
	var n uint64
	for _, c := range r.Unknown {
		n += c
	}
	return fmt.Sprintf("%s of kinds or events this sbx audit does not know, written by a newer gateway (%s)", plural(n, "record", "records"), clip(visible(rulesText(r.Unknown)), maxWideCell))
}

func writeText(w io.Writer, r *Report) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "sbx audit of %s\n", visible(strings.Join(r.Logs, ", ")))
	if len(r.Sandboxes) > 0 {
		fmt.Fprintf(ew, "sandboxes: %s\n", wideCell(strings.Join(first(r.Sandboxes, 20), ", ")))
	}
	fmt.Fprintf(ew, "from %s\n", r.span())
	for _, warn := range r.warnings() {
		fmt.Fprintf(ew, "WARNING: %s\n", visible(warn))
	}
	if len(r.Targets) > 0 {
		fmt.Fprintf(ew, "\nTargets\n")
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TARGET\tKINDS\tALLOW\tBLOCK\tINTERCEPT\tOUT\tIN\tRULES\tMETHODS, PATHS\tPROCESSES")
		for _, t := range r.Targets {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", cell(hostPort(t.Host, t.Port)),
				cell(strings.Join(t.Kinds, ",")), t.Allowed, t.Blocked, t.Intercepted, byteSize(t.BytesOut), byteSize(t.BytesIn),
				cell(rulesText(t.Rules)), cell(methodsPaths(t, 3)), cell(strings.Join(t.Processes, ",")))
		}
		tw.Flush()
	}
	if len(r.DNSNames) > 0 {
		fmt.Fprintf(ew, "\nDNS queries\n")
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tTYPES\tANSWERED\tREFUSED\tPROCESSES")
		for _, d := range r.DNSNames {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", cell(d.Name), cell(strings.Join(d.Types, ",")), d.Allowed+d.Intercepted, d.Blocked, cell(strings.Join(d.Processes, ",")))
		}
		tw.Flush()
	}
	if len(r.Bypass) > 0 {
		fmt.Fprintf(ew, "\nPackets around the gateway (refused)\n")
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROTO\tDESTINATION\tPACKETS\tFIRST\tLAST\tPROCESSES")
		for _, b := range r.Bypass {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", cell(b.Proto), cell(bypassDest(b)), b.Packets, clock(b.First), clock(b.Last), cell(strings.Join(b.Processes, ",")))
		}
		tw.Flush()
	}
	if len(r.Processes) > 0 {
		fmt.Fprintf(ew, "\nProcesses\n")
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "COMMAND\tEXECUTABLE\tPIDS\tTARGETS\tALLOW\tBLOCK\tINTERCEPT")
		for _, p := range r.Processes {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\n", cell(p.Comm), cell(p.Exe), p.PIDs, p.Targets, p.Allowed, p.Blocked, p.Intercepted)
		}
		tw.Flush()
	}
	if len(r.PolicyChanges) > 0 {
		fmt.Fprintf(ew, "\nPolicy changes\n")
		for _, c := range r.PolicyChanges {
			fmt.Fprintf(ew, "  %s  v%d  %s\n", clock(c.Time), c.PolicyVersion, visible(c.Change))
		}
	}
	if len(r.Approvals) > 0 {
		fmt.Fprintf(ew, "\nApprovals (who answered what)\n")
		for _, a := range r.Approvals {
			fmt.Fprintf(ew, "  %s  %s  %s %s by %s  %s\n", clock(a.Time), visible(a.ApprovalID), visible(a.Answer), visible(a.Scope), visible(a.By), visible(net.JoinHostPort(a.Host, strconv.Itoa(a.Port))))
		}
	}
	if r.RefusedClients > 0 {
		fmt.Fprintf(ew, "\n%s refused before any request (not the sandbox's, or over its connection cap)\n", plural(r.RefusedClients, "connection", "connections"))
	}
	fmt.Fprintf(ew, "\nSummary: %s\n", r.SummaryLine())
	return ew.err
}

func writeMarkdown(w io.Writer, r *Report) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "## sbx audit\n\n")
	fmt.Fprintf(ew, "**%s**\n\n", mdText(r.SummaryLine()))
	fmt.Fprintf(ew, "Logs: %s  \n", mdCode(strings.Join(r.Logs, ", ")))
	if len(r.Sandboxes) > 0 {
		fmt.Fprintf(ew, "Sandboxes: %s  \n", mdCode(wideCell(strings.Join(first(r.Sandboxes, 20), ", "))))
	}
	fmt.Fprintf(ew, "From %s\n\n", mdText(r.span()))
	for _, warn := range r.warnings() {
		fmt.Fprintf(ew, "> **Warning:** %s\n\n", mdText(warn))
	}
	if len(r.Targets) > 0 {
		fmt.Fprintf(ew, "### Targets\n\n| target | kinds | allowed | blocked | intercepted | out | in | rules | methods, paths | processes |\n|---|---|--:|--:|--:|--:|--:|---|---|---|\n")
		for _, t := range r.Targets {
			fmt.Fprintf(ew, "| %s | %s | %d | %d | %d | %s | %s | %s | %s | %s |\n", mdCell(hostPort(t.Host, t.Port)), mdCell(strings.Join(t.Kinds, ", ")),
				t.Allowed, t.Blocked, t.Intercepted, byteSize(t.BytesOut), byteSize(t.BytesIn), mdCell(rulesText(t.Rules)),
				mdCell(methodsPaths(t, 3)), mdCell(strings.Join(t.Processes, ", ")))
		}
		fmt.Fprintln(ew)
	}
	if len(r.DNSNames) > 0 {
		fmt.Fprintf(ew, "### DNS queries\n\n| name | types | answered | refused | processes |\n|---|---|--:|--:|---|\n")
		for _, d := range r.DNSNames {
			fmt.Fprintf(ew, "| %s | %s | %d | %d | %s |\n", mdCell(d.Name), mdCell(strings.Join(d.Types, ", ")), d.Allowed+d.Intercepted, d.Blocked, mdCell(strings.Join(d.Processes, ", ")))
		}
		fmt.Fprintln(ew)
	}
	if len(r.Bypass) > 0 {
		fmt.Fprintf(ew, "### Packets around the gateway (refused)\n\n| proto | destination | packets | processes |\n|---|---|--:|---|\n")
		for _, b := range r.Bypass {
			fmt.Fprintf(ew, "| %s | %s | %d | %s |\n", mdCell(b.Proto), mdCell(bypassDest(b)), b.Packets, mdCell(strings.Join(b.Processes, ", ")))
		}
		fmt.Fprintln(ew)
	}
	if len(r.Processes) > 0 {
		fmt.Fprintf(ew, "### Processes\n\n| command | executable | targets | allowed | blocked | intercepted |\n|---|---|--:|--:|--:|--:|\n")
		for _, p := range r.Processes {
			fmt.Fprintf(ew, "| %s | %s | %d | %d | %d | %d |\n", mdCell(p.Comm), mdCell(p.Exe), p.Targets, p.Allowed, p.Blocked, p.Intercepted)
		}
		fmt.Fprintln(ew)
	}
	return ew.err
}

// WriteExpectation writes the outcome of Expect as text, markdown or JSON.
func WriteExpectation(w io.Writer, e *Expectation, format string) error {
	if format == FormatJSON {
		return writeJSON(w, struct {
			Holds bool `json:"holds"`
			*Expectation
		}{e.Holds(), e})
	}
	md := format == FormatMarkdown
	ew := &errWriter{w: w}
	txt := visible
	if md {
		txt = mdText
		fmt.Fprintf(ew, "## sbx audit --expect %s\n\n", mdCode(e.Policy))
	}
	switch {
	case e.Holds() && e.Denied > 0:
		fmt.Fprintf(ew, "%s allows all %s in the logs but %d that a person denied when asked, which it blocks as they were.\n", txt(e.Policy), plural(e.Attempts, "attempt", "attempts"), e.Denied)
		return ew.err
	case e.Holds():
		fmt.Fprintf(ew, "%s allows all %s in the logs.\n", txt(e.Policy), plural(e.Attempts, "attempt", "attempts"))
		return ew.err
	case len(e.Unexpected) > 0:
		fmt.Fprintf(ew, "%s does not allow %s:\n\n", txt(e.Policy), plural(uint64(len(e.Unexpected)), "target the logs show", "targets the logs show"))
	}
	if md && len(e.Unexpected) > 0 {
		fmt.Fprintf(ew, "| kind | target | attempts | logged as | policy says |\n|---|---|--:|---|---|\n")
		for _, u := range e.Unexpected {
			fmt.Fprintf(ew, "| %s | %s | %d | %s | %s |\n", mdCell(u.Kind), mdCell(unexpectedTarget(u)), u.Attempts, mdText(wideCell(u.Logged)), mdText(wideCell(u.Rule+": "+u.Reason)))
		}
		fmt.Fprintln(ew)
	} else if len(e.Unexpected) > 0 {
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tTARGET\tATTEMPTS\tLOGGED AS\tPOLICY SAYS")
		for _, u := range e.Unexpected {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", cell(u.Kind), cell(unexpectedTarget(u)), u.Attempts, wideCell(u.Logged), wideCell(u.Rule+": "+u.Reason))
		}
		tw.Flush()
	}
	if e.NotKept > 0 {
		fmt.Fprintf(ew, "\n%d more attempts at targets the policy does not allow, beyond those listed.\n", e.NotKept)
	}
	if e.Dropped > 0 {
		fmt.Fprintf(ew, "\nThe gateway left at least %d records out of the logs (over its log budget, or reports of refused packets it lost): what they were cannot be replayed, so the logs cannot show that the policy allows everything.\n", e.Dropped)
	}
	for _, t := range e.Truncated {
		fmt.Fprintf(ew, "\n%s; so the logs cannot show that the policy allows everything.\n", txt(t))
	}
	for _, g := range e.Gaps {
		fmt.Fprintf(ew, "\n%s; so the logs cannot show that the policy allows everything.\n", txt(g))
	}
	return ew.err
}

func unexpectedTarget(u *Unexpected) string {
	if u.Host == "" && u.Port == 0 && u.Proto == "" && u.Method == "" {
		return "(no target)"
	}
	t := hostPort(u.Host, u.Port)
	if u.Proto != "" {
		t = u.Proto + " " + u.Host
		if u.Port != 0 {
			t += ":" + strconv.Itoa(u.Port)
		}
	}
	if u.Method != "" {
		t = u.Method + " " + t + u.Path
	}
	return t
}

// WriteDiff writes a Diff as text, markdown or JSON.
func WriteDiff(w io.Writer, d *Diff, format string) error {
	if format == FormatJSON {
		return writeJSON(w, struct {
			ReachesNew bool `json:"reaches_new"`
			FoundNew   bool `json:"found_new"`
			*Diff
		}{d.ReachesNew(), d.FoundNew(), d})
	}
	md := format == FormatMarkdown
	ew := &errWriter{w: w}
	head := func(s string) {
		if md {
			fmt.Fprintf(ew, "\n### %s\n\n", s)
		} else {
			fmt.Fprintf(ew, "\n%s\n", s)
		}
	}
	item := func(s string) {
		if md {
			fmt.Fprintf(ew, "- %s\n", mdText(s))
		} else {
			fmt.Fprintf(ew, "  %s\n", visible(s))
		}
	}
	txt, br := visible, "\n"
	if md {
		txt, br = mdText, "  \n"
		fmt.Fprintf(ew, "## sbx audit --diff\n\n")
	}
	fmt.Fprintf(ew, "old: %s%snew: %s\n", txt(strings.Join(d.Old, ", ")), br, txt(strings.Join(d.New, ", ")))
	for _, s := range d.Incomplete {
		item("WARNING: " + s + "; the diff may miss what is new")
	}
	if len(d.NewTargets)+len(d.NewDNSNames)+len(d.NewBypass) > 0 {
		head("New: reached by the new logs only")
		for _, t := range d.NewTargets {
			item(fmt.Sprintf("%s  %s  %s  (%s)", hostPort(t.Host, t.Port), strings.Join(t.Kinds, ","), verdicts(t.Counts), clip(methodsPaths(t, 5), maxWideCell)))
		}
		for _, n := range d.NewDNSNames {
			item(fmt.Sprintf("dns %s  %s", n.Name, verdicts(n.Counts)))
		}
		for _, b := range d.NewBypass {
			item(fmt.Sprintf("%s %s  %s (refused)", b.Proto, bypassDest(b), plural(b.Packets, "packet", "packets")))
		}
	}
	if len(d.Changed) > 0 {
		head("Changed")
		for _, c := range d.Changed {
			s := hostPort(c.Host, c.Port) + ": " + strings.Join(c.Changed, ", ")
			if len(c.NewKinds) > 0 {
				s += "; new kinds " + strings.Join(c.NewKinds, ",")
			}
			if len(c.NewMethods) > 0 {
				s += "; new methods " + strings.Join(c.NewMethods, ",")
			}
			if len(c.NewPaths) > 0 {
				paths := slices.Clone(first(c.NewPaths, 10))
				for i, p := range paths {
					paths[i] = clip(p, maxCell)
				}
				s += "; new paths " + strings.Join(paths, " ")
			}
			if c.PathsUncertain {
				s += " (not every path was kept)"
			}
			if c.MethodsUncertain {
				s += " (not every method was kept)"
			}
			item(s)
		}
	}
	if len(d.GoneTargets)+len(d.GoneDNS)+len(d.GoneBypass) > 0 {
		head("No longer reached")
		for _, t := range d.GoneTargets {
			item(fmt.Sprintf("%s  %s", hostPort(t.Host, t.Port), verdicts(t.Counts)))
		}
		for _, n := range d.GoneDNS {
			item("dns " + n.Name)
		}
		for _, b := range d.GoneBypass {
			item(b.Proto + " " + bypassDest(b))
		}
	}
	if len(d.NewProcesses) > 0 {
		head("New processes")
		item(strings.Join(d.NewProcesses, ", "))
	}
	switch {
	case d.FoundNew():
		fmt.Fprintf(ew, "\nThe new logs reach something the old ones do not.\n")
	case d.ReachesNew():
		// Not a claim of new reach: the exit (1) is for the logs'
		// being incomplete.
		fmt.Fprintf(ew, "\nNothing new is seen in what the logs hold, but they are incomplete (see the warnings above), so something new cannot be ruled out.\n")
	default:
		fmt.Fprintf(ew, "\nNothing new is reached.\n")
	}
	return ew.err
}

func verdicts(c Counts) string {
	return fmt.Sprintf("%d allowed, %d blocked, %d intercepted", c.Allowed, c.Blocked, c.Intercepted)
}

func first(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(slices.Clone(s[:n]), fmt.Sprintf("(and %d more)", len(s)-n))
}

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

func bypassDest(b *Bypass) string {
	switch {
	case b.Host == "":
		return "(destinations not kept apart)"
	case b.Port == 0:
		return b.Host
	}
	return hostPort(b.Host, b.Port)
}

// rulesText lists rules with their counts, the most used first.
func rulesText(rules map[string]uint64) string {
	ids := slices.SortedFunc(maps.Keys(rules), func(a, b string) int {
		if rules[a] != rules[b] {
			if rules[a] > rules[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%s×%d", id, rules[id])
	}
	return strings.Join(parts, " ")
}

// methodsPaths lists t's methods and its n most frequent paths.
func methodsPaths(t *Target, n int) string {
	s := strings.Join(t.Methods, ",")
	if t.MethodsIncomplete {
		s += ",+more"
	}
	for i, p := range t.Paths {
		if i == n {
			s += fmt.Sprintf(" +%d", len(t.Paths)-n)
			break
		}
		s += fmt.Sprintf(" %s×%d", p.Path, p.Count)
	}
	return strings.TrimSpace(s)
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05Z")
}

// Widths of table cells, in characters: a string from the log is cut to
// this, with "…", so that a row stays readable and tabwriter's work
// bounded however long the string.
const (
	maxCell     = 120
	maxWideCell = 400 // a cell that explains: logged as, policy says
)

// cell is s as a text table cell: visible, and cut to maxCell.
func cell(s string) string { return clip(visible(s), maxCell) }

// wideCell is s as a text table cell of up to maxWideCell characters.
func wideCell(s string) string { return clip(visible(s), maxWideCell) }

// mdCell is s as a markdown table cell: code, cut to maxCell.
func mdCell(s string) string { return mdCode(cell(s)) }

// mdText escapes what markdown would read as markup.
func mdText(s string) string {
	var b strings.Builder
	for _, c := range visible(s) {
		if strings.ContainsRune("\\`*_{}[]()<>#+-.!|~&", c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// mdCode writes s as inline code: a run of backticks longer than any in s,
// and '|' escaped, so that a table cell stays one cell.
func mdCode(s string) string {
	if s == "" {
		return ""
	}
	s = strings.ReplaceAll(visible(s), "|", "\\|")
	ticks := "`"
	for strings.Contains(s, ticks) {
		ticks += "`"
	}
	pad := ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		pad = " "
	}
	return ticks + pad + s + pad + ticks
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
