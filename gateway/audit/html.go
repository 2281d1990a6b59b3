package audit

import (
	"cmp"
	"fmt"
	"html/template"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// Geometry of the charts, in SVG user units.
const (
	chartWidth = 960

	// The timeline: one stacked column per bucket.
	tlLeft, tlRight, tlTop, tlBottom = 56, 12, 12, 34
	tlPlotHeight                     = 180

	// The per-host chart: one stacked row per target.
	hostLabelWidth  = 330
	hostRight       = 90
	hostRowHeight   = 22
	hostBarHeight   = 15
	maxChartTargets = 50
)

// WriteHTML writes rep as one self-contained HTML page: a summary, a
// timeline and a per-host chart (inline SVG), and the tables of the report.
// The page loads nothing (no script, font, image or style sheet from
// anywhere; its Content-Security-Policy forbids all of it), so it reads
// the same offline and leaks nothing when opened.
//
// Every string of the report came from a log and is untrusted: it is only
// ever written as escaped text or attribute values, never in a URL, style
// or script, with control and bidirectional-formatting characters shown
// as escapes (\x07, \u202e). Each chart bar carries its numbers in data
// attributes: a timeline bar is a <g class="bucket" data-start
// data-allowed data-blocked data-intercepted>, a host bar a <g
// class="target" data-host data-port data-allowed data-blocked
// data-intercepted> (data-host as shown, hidden characters escaped), and
// each bar's rects are as long as their counts against the chart's
// largest bar (the svg's data-max), so a program can read them back.
func WriteHTML(w io.Writer, rep *Report) error {
	if err := htmlTemplate().Execute(w, newHTMLView(rep)); err != nil {
		return fmt.Errorf("writing html report: %w", err)
	}
	return nil
}

// htmlView is what the template shows: the report, and what is computed
// from it for the page.
type htmlView struct {
	R          *Report
	Logs       []string
	Sandboxes  []string
	MoreSbx    int
	Span       string
	Stats      []htmlStatGroup
	Overflow   []string
	Notices    []string
	Timeline   *timelineChart
	Hosts      *hostChart
	Targets    []targetRow
	DNS        []dnsRow
	Bypass     []bypassRow
	Processes  []processRow
	Changes    []changeRow
	Unenforced uint64
}

// htmlStatGroup is one box of the summary: a few numbers under a heading.
type htmlStatGroup struct {
	Title string
	Stats []htmlStat
}

// htmlStat is one number of the summary. Key is its path in the JSON
// report (requests.allowed); Value the exact number; Text how it reads.
type htmlStat struct {
	Label, Key, Text, Class string
	Value                   string
}

// timelineChart is the timeline: one stacked column per bucket, over a
// plot PlotHeight high whose tallest column has Max attempts.
type timelineChart struct {
	Width, Height, PlotHeight int
	Left, Right, Top, Base    int // the plot's edges
	Max                       uint64
	BucketSeconds             int64
	Bars                      []timelineBar
	Axis                      []axisLabel
	From, To                  string
}

// timelineBar is the column of one bucket.
type timelineBar struct {
	Start                         string // RFC 3339
	Allowed, Blocked, Intercepted uint64
	Title                         string
	Rects                         []barRect
}

// barRect is the part of a bar for one verdict. Coordinates are written
// as SVG numbers.
type barRect struct {
	Class               string // a, b or i: allowed, blocked, intercepted
	X, Y, Width, Height string
	Count               uint64
}

// axisLabel is a text on an axis of the timeline.
type axisLabel struct {
	X, Y   int
	Anchor string
	Text   string
}

// hostChart is the per-target chart: one stacked row for each of the
// largest targets, the longest BarLength long for Max attempts; More
// targets, with MoreAttempts attempts, are not drawn.
type hostChart struct {
	Width, Height, BarLength int
	Max                      uint64
	Bars                     []hostBar
	LabelX                   int
	More                     uint64
	MoreAttempts             uint64
}

// hostBar is the row of one target.
type hostBar struct {
	Host                          string
	Port                          int
	Label                         string
	Allowed, Blocked, Intercepted uint64
	Total                         string
	Title                         string
	LabelY, TextX                 int
	Rects                         []barRect
}

// targetRow, dnsRow, bypassRow, processRow and changeRow are the rows of
// the tables, their strings made visible (see visible).
type targetRow struct {
	Host, Port, Kinds, Methods string
	Paths                      []string
	MorePaths                  string
	Counts
	BytesOut, BytesIn string
	First, Last       string
	Rules, Processes  string
	InterceptStatus   int
}

type dnsRow struct {
	Name, Types string
	Counts
	First, Last, Processes string
}

type bypassRow struct {
	Proto, Host, Port      string
	Packets, Records       uint64
	First, Last, Processes string
}

type processRow struct {
	Comm, Exe string
	Counts
	Targets, PIDs int
}

type changeRow struct {
	Time, Version, Change string
}

func newHTMLView(r *Report) *htmlView {
	v := &htmlView{R: r, Unenforced: r.Requests.Unenforced}
	for _, l := range r.Logs {
		v.Logs = append(v.Logs, visible(l))
	}
	for i, s := range r.Sandboxes {
		if i == 20 {
			v.MoreSbx = len(r.Sandboxes) - i
			break
		}
		v.Sandboxes = append(v.Sandboxes, visible(s))
	}
	switch {
	case r.First.IsZero():
		v.Span = "no timed records"
	default:
		v.Span = when(r.First) + " to " + when(r.Last) + " (" + r.Last.Sub(r.First).Round(time.Second).String() + ")"
	}
	counts := func(prefix string, c Counts) []htmlStat {
		s := []htmlStat{
			numStat("allowed", prefix+".allowed", c.Allowed, "a"),
			numStat("blocked", prefix+".blocked", c.Blocked, "b"),
			numStat("intercepted", prefix+".intercepted", c.Intercepted, "i"),
		}
		if c.Unenforced > 0 {
			s = append(s, numStat("let through (audit mode)", prefix+".unenforced", c.Unenforced, "b"))
		}
		return s
	}
	v.Stats = []htmlStatGroup{
		{"Records", []htmlStat{
			numStat("records", "records", r.Records, ""),
			numStat("dropped", "dropped", r.Dropped, warnClass(r.Dropped)),
			numStat("policy changes", "", uint64(len(r.PolicyChanges)), ""),
		}},
		{"Requests", counts("requests", r.Requests)},
		{"DNS queries", counts("dns", r.DNS)},
		{"Around the gateway", []htmlStat{
			numStat("bypass packets", "bypass_packets", r.BypassPackets, warnClass(r.BypassPackets)),
			numStat("refused clients", "refused_clients", r.RefusedClients, ""),
		}},
		{"Bytes", []htmlStat{
			byteStat("out", "bytes_out", r.BytesOut),
			byteStat("in", "bytes_in", r.BytesIn),
		}},
	}
	if len(r.Capped) > 0 {
		// Refusals by the gateway's per-client caps, not by the policy.
		g := htmlStatGroup{"Per-client caps", nil}
		for _, c := range []struct{ name, label string }{
			{decisionlog.CapConns, "connections refused (" + decisionlog.CapConns + ")"},
			{decisionlog.CapTunnels, "tunnels refused (" + decisionlog.CapTunnels + ")"},
		} {
			if n := r.Capped[c.name]; n > 0 {
				g.Stats = append(g.Stats, numStat(c.label, "capped."+c.name, n, "b"))
			}
		}
		if len(g.Stats) > 0 {
			v.Stats = append(v.Stats, g)
		}
	}
	o := r.Overflow
	for _, f := range []struct {
		n    uint64
		what string
	}{
		{o.Targets, "attempts at targets beyond the table's limit"},
		{o.DNSNames, "DNS queries for names beyond the table's limit"},
		{o.Bypass, "bypass packets to destinations beyond the table's limit"},
		{o.Processes, "attempts by processes beyond the table's limit"},
		{o.Paths, "requests for paths beyond the limit of paths kept"},
	} {
		if f.n > 0 {
			v.Overflow = append(v.Overflow, digits(f.n)+" "+f.what)
		}
	}
	for _, n := range r.notices() {
		v.Notices = append(v.Notices, visible(n))
	}
	v.Timeline = newTimeline(r)
	v.Hosts = newHostChart(r)
	for _, t := range r.Targets {
		v.Targets = append(v.Targets, newTargetRow(t))
	}
	for _, d := range r.DNSNames {
		v.DNS = append(v.DNS, dnsRow{
			Name: visible(d.Name), Types: list(d.Types), Counts: d.Counts,
			First: when(d.First), Last: when(d.Last), Processes: list(d.Processes),
		})
	}
	for _, b := range r.Bypass {
		v.Bypass = append(v.Bypass, bypassRow{
			Proto: visible(b.Proto), Host: visible(b.Host), Port: portText(b.Port),
			Packets: b.Packets, Records: b.Records,
			First: when(b.First), Last: when(b.Last), Processes: list(b.Processes),
		})
	}
	for _, p := range r.Processes {
		v.Processes = append(v.Processes, processRow{
			Comm: visible(p.Comm), Exe: visible(p.Exe), Counts: p.Counts, Targets: p.Targets, PIDs: p.PIDs,
		})
	}
	for _, c := range r.PolicyChanges {
		row := changeRow{Time: when(c.Time), Change: visible(c.Change)}
		if c.PolicyVersion != 0 {
			row.Version = strconv.FormatUint(c.PolicyVersion, 10)
		}
		v.Changes = append(v.Changes, row)
	}
	return v
}

func numStat(label, key string, n uint64, class string) htmlStat {
	return htmlStat{Label: label, Key: key, Value: strconv.FormatUint(n, 10), Text: digits(n), Class: class}
}

func byteStat(label, key string, n int64) htmlStat {
	return htmlStat{Label: label, Key: key, Value: strconv.FormatInt(n, 10), Text: byteSize(n)}
}

func warnClass(n uint64) string {
	if n > 0 {
		return "warn"
	}
	return ""
}

// newTimeline lays out one stacked column per bucket, heights scaled
// against the largest bucket; nil when there is no bucket.
func newTimeline(r *Report) *timelineChart {
	if len(r.Timeline) == 0 {
		return nil
	}
	c := &timelineChart{
		Width: chartWidth, Height: tlTop + tlPlotHeight + tlBottom, PlotHeight: tlPlotHeight,
		BucketSeconds: r.BucketSeconds,
		Left:          tlLeft, Right: chartWidth - tlRight, Top: tlTop, Base: tlTop + tlPlotHeight,
	}
	for _, b := range r.Timeline {
		c.Max = max(c.Max, b.Total())
	}
	step := time.Duration(max(r.BucketSeconds, 1)) * time.Second
	plotW := float64(chartWidth - tlLeft - tlRight)
	slot := plotW / float64(len(r.Timeline))
	barW := slot * 0.8
	if slot >= 3 {
		barW = max(slot-2, slot*0.8)
	}
	base := float64(tlTop + tlPlotHeight)
	for i, b := range r.Timeline {
		bar := timelineBar{
			Start:   b.Start.UTC().Format(time.RFC3339Nano),
			Allowed: b.Allowed, Blocked: b.Blocked, Intercepted: b.Intercepted,
			Title: fmt.Sprintf("%s to %s: %s allowed, %s blocked, %s intercepted",
				when(b.Start), when(b.Start.Add(step)), digits(b.Allowed), digits(b.Blocked), digits(b.Intercepted)),
		}
		x := float64(tlLeft) + float64(i)*slot + (slot-barW)/2
		y := base
		for _, p := range []struct {
			class string
			n     uint64
		}{{"a", b.Allowed}, {"b", b.Blocked}, {"i", b.Intercepted}} {
			if p.n == 0 {
				continue
			}
			h := scale(p.n, c.Max, tlPlotHeight)
			y -= h
			bar.Rects = append(bar.Rects, barRect{Class: p.class, X: coord(x), Y: coord(y), Width: coord(barW), Height: coord(h), Count: p.n})
		}
		c.Bars = append(c.Bars, bar)
	}
	first, last := r.Timeline[0].Start, r.Timeline[len(r.Timeline)-1].Start.Add(step)
	c.From, c.To = when(first), when(last)
	c.Axis = []axisLabel{
		{X: tlLeft - 6, Y: tlTop + 10, Anchor: "end", Text: digits(c.Max)},
		{X: tlLeft - 6, Y: tlTop + tlPlotHeight, Anchor: "end", Text: "0"},
		{X: tlLeft, Y: tlTop + tlPlotHeight + 22, Anchor: "start", Text: when(first)},
		{X: chartWidth - tlRight, Y: tlTop + tlPlotHeight + 22, Anchor: "end", Text: when(last)},
	}
	return c
}

// newHostChart lays out one stacked row for each of the largest targets,
// lengths scaled against the largest; nil when there is no target.
func newHostChart(r *Report) *hostChart {
	if len(r.Targets) == 0 {
		return nil
	}
	ts := slices.Clone(r.Targets)
	slices.SortStableFunc(ts, func(a, b *Target) int {
		return cmp.Or(cmp.Compare(b.Total(), a.Total()), strings.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port))
	})
	c := &hostChart{Width: chartWidth, BarLength: chartWidth - hostLabelWidth - hostRight, LabelX: hostLabelWidth - 8}
	if len(ts) > maxChartTargets {
		c.More = uint64(len(ts) - maxChartTargets)
		for _, t := range ts[maxChartTargets:] {
			c.MoreAttempts += t.Total()
		}
		ts = ts[:maxChartTargets]
	}
	c.Max = ts[0].Total()
	c.Height = len(ts)*hostRowHeight + 8
	for i, t := range ts {
		top := 4 + i*hostRowHeight
		name := visible(net.JoinHostPort(t.Host, strconv.Itoa(t.Port)))
		bar := hostBar{
			Host: visible(t.Host), Port: t.Port, Label: clip(name, 48),
			Allowed: t.Allowed, Blocked: t.Blocked, Intercepted: t.Intercepted,
			Total: digits(t.Total()),
			Title: fmt.Sprintf("%s: %s allowed, %s blocked, %s intercepted",
				name, digits(t.Allowed), digits(t.Blocked), digits(t.Intercepted)),
			LabelY: top + hostRowHeight/2 + 4,
		}
		x := float64(hostLabelWidth)
		y := float64(top + (hostRowHeight-hostBarHeight)/2)
		for _, p := range []struct {
			class string
			n     uint64
		}{{"a", t.Allowed}, {"b", t.Blocked}, {"i", t.Intercepted}} {
			if p.n == 0 {
				continue
			}
			w := scale(p.n, c.Max, c.BarLength)
			bar.Rects = append(bar.Rects, barRect{Class: p.class, X: coord(x), Y: coord(y), Width: coord(w), Height: coord(hostBarHeight), Count: p.n})
			x += w
		}
		bar.TextX = int(x) + 6
		c.Bars = append(c.Bars, bar)
	}
	return c
}

// scale is n's share of length, against max.
func scale(n, max uint64, length int) float64 {
	if max == 0 {
		return 0
	}
	return float64(n) / float64(max) * float64(length)
}

// coord writes an SVG coordinate with at most three decimals.
func coord(f float64) string {
	return strconv.FormatFloat(math.Round(f*1000)/1000, 'f', -1, 64)
}

func newTargetRow(t *Target) targetRow {
	row := targetRow{
		Host: visible(t.Host), Port: portText(t.Port),
		Kinds: list(t.Kinds), Methods: list(t.Methods),
		Counts:   t.Counts,
		BytesOut: byteSize(t.BytesOut), BytesIn: byteSize(t.BytesIn),
		First: when(t.First), Last: when(t.Last),
		Processes: list(t.Processes), InterceptStatus: t.InterceptStatus,
	}
	for i, p := range t.Paths {
		if i == 3 {
			break
		}
		row.Paths = append(row.Paths, clip(visible(p.Path), 120)+" ×"+digits(p.Count))
	}
	var more []string
	if n := len(t.Paths) - 3; n > 0 {
		more = append(more, digits(uint64(n))+" more")
	}
	if t.PathsIncomplete {
		more = append(more, "some not kept")
	}
	row.MorePaths = strings.Join(more, ", ")
	type rc struct {
		rule string
		n    uint64
	}
	var rules []rc
	for k, n := range t.Rules {
		rules = append(rules, rc{k, n})
	}
	slices.SortFunc(rules, func(a, b rc) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.rule, b.rule)) })
	var rs []string
	for _, r := range rules {
		name := r.rule
		if name == "" {
			name = `""`
		}
		rs = append(rs, visible(name)+" ×"+digits(r.n))
	}
	row.Rules = strings.Join(rs, ", ")
	return row
}

func portText(p int) string {
	if p == 0 {
		return ""
	}
	return strconv.Itoa(p)
}

// list joins strings from the log for a table cell.
func list(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = clip(visible(s), 120)
	}
	return strings.Join(out, ", ")
}

// when writes t in UTC for people, to the second; "" for the zero time.
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// digits writes n with thousands separated: 1,234,567.
func digits(n uint64) string {
	s := strconv.FormatUint(n, 10)
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	lead := len(s) % 3
	if lead > 0 {
		b.WriteString(s[:lead])
	}
	for i := lead; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// htmlTemplate is the page's template, parsed when a report is first
// written rather than when sbx starts: most runs write none.
var htmlTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"digits": digits,
		"when":   when,
	}).Parse(htmlSource))
})

// htmlSource is the page. Nothing from the log is placed in a URL, style
// or script: there are none but the data: favicon, and the colours come
// from the classes a (allowed), b (blocked) and i (intercepted).
const htmlSource = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>sbx audit report</title>
<style>
:root { color-scheme: light; --a: #2e7d32; --b: #c62828; --i: #1565c0; --line: #d0d7de; --muted: #57606a; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #1f2328; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
.meta { color: var(--muted); margin: 0 0 16px; }
.meta b { color: #1f2328; font-weight: 600; }
.warn-box { border: 1px solid #d4a72c; border-left: 6px solid #bf8700; background: #fff8c5; padding: 10px 14px; margin: 12px 0; border-radius: 4px; }
.warn-box.severe { border-color: #cf222e; border-left-color: #cf222e; background: #ffebe9; }
.warn-box ul { margin: 4px 0 0; padding-left: 20px; }
.stats { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.group { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 170px; }
.group h3 { font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); margin: 0 0 4px; }
.stat { display: flex; justify-content: space-between; gap: 16px; }
.stat .n { font-variant-numeric: tabular-nums; font-weight: 600; }
.stat .n.a { color: var(--a); } .stat .n.b { color: var(--b); } .stat .n.i { color: var(--i); } .stat .n.warn { color: #cf222e; }
.legend { display: flex; gap: 16px; color: var(--muted); margin: 4px 0 6px; }
.sw { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 5px; vertical-align: -1px; }
.sw.a { background: var(--a); } .sw.b { background: var(--b); } .sw.i { background: var(--i); }
svg { display: block; max-width: 100%; height: auto; font: 11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
svg text { fill: #57606a; }
svg text.label { fill: #1f2328; }
rect.a { fill: var(--a); } rect.b { fill: var(--b); } rect.i { fill: var(--i); }
rect.bg { fill: #f6f8fa; }
line.axis { stroke: #8c959f; stroke-width: 1; }
g.bucket:hover rect, g.target:hover rect { opacity: .8; }
.note { color: var(--muted); margin: 4px 0; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid #eaeef2; vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; position: sticky; top: 0; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fbfcfd; }
tbody tr:hover { background: #f3f6f9; }
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.a { color: var(--a); } td.b { color: var(--b); } td.i { color: var(--i); }
td.zero { color: #afb8c1; }
td.t { min-width: 7.5em; font-variant-numeric: tabular-nums; }
td.s { min-width: 7em; max-width: 24em; overflow-wrap: anywhere; }
td.s.wide { min-width: 11em; }
td.host { min-width: 10em; max-width: 22em; font-weight: 600; overflow-wrap: anywhere; }
.paths { margin: 0; padding: 0; list-style: none; }
.empty { color: var(--muted); font-style: italic; }
</style>
</head>
<body>
<header>
<h1>sbx audit report</h1>
<p class="meta">
{{- if .Logs}}Logs: <b>{{range $i, $l := .Logs}}{{if $i}}, {{end}}{{$l}}{{end}}</b>. {{end -}}
{{- if .Sandboxes}}Sandboxes: <b>{{range $i, $s := .Sandboxes}}{{if $i}}, {{end}}{{$s}}{{end}}</b>{{if .MoreSbx}} and {{.MoreSbx}} more{{end}}. {{end -}}
Time span: <b data-stat="span">{{.Span}}</b>.
</p>
{{- if .R.Dropped}}
<div class="warn-box severe" role="alert" data-warning="dropped"><b>The log is incomplete:</b> the gateway left at least {{digits .R.Dropped}} records out of it (over its log budget, or reports of refused packets it lost). Every count below is a lower bound, and targets may be missing.</div>
{{- end}}
{{- if .Overflow}}
<div class="warn-box" role="alert" data-warning="overflow"><b>Some attempts are counted but not listed:</b> the report kept tables within its limits, and left out
<ul>{{range .Overflow}}<li>{{.}}</li>{{end}}</ul></div>
{{- end}}
{{- range .Notices}}
<div class="warn-box" role="alert" data-warning="notice"><b>Note:</b> {{.}}.</div>
{{- end}}
{{- if .Unenforced}}
<div class="warn-box" data-warning="unenforced"><b>Audit mode:</b> {{digits .Unenforced}} blocked requests were let through.</div>
{{- end}}
<section class="stats">
{{- range .Stats}}
<div class="group"><h3>{{.Title}}</h3>
{{- range .Stats}}
<div class="stat"><span>{{.Label}}</span><span class="n{{if .Class}} {{.Class}}{{end}}"{{if .Key}} data-stat="{{.Key}}" data-value="{{.Value}}"{{end}}>{{.Text}}</span></div>
{{- end}}
</div>
{{- end}}
</section>
</header>
<main>
<h2>Timeline</h2>
{{- with .Timeline}}
<div class="legend"><span><span class="sw a"></span>allowed</span><span><span class="sw b"></span>blocked</span><span><span class="sw i"></span>intercepted</span></div>
<svg class="timeline" role="img" aria-label="attempts over time" viewBox="0 0 {{.Width}} {{.Height}}" width="{{.Width}}" height="{{.Height}}" data-max="{{.Max}}" data-plot-height="{{.PlotHeight}}" data-bucket-seconds="{{.BucketSeconds}}">
<line class="axis" x1="{{.Left}}" y1="{{.Base}}" x2="{{.Right}}" y2="{{.Base}}"></line>
<line class="axis" x1="{{.Left}}" y1="{{.Top}}" x2="{{.Left}}" y2="{{.Base}}"></line>
{{- range .Axis}}
<text x="{{.X}}" y="{{.Y}}" text-anchor="{{.Anchor}}">{{.Text}}</text>
{{- end}}
{{- range .Bars}}
<g class="bucket" data-start="{{.Start}}" data-allowed="{{.Allowed}}" data-blocked="{{.Blocked}}" data-intercepted="{{.Intercepted}}"><title>{{.Title}}</title>
{{- range .Rects}}<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.Width}}" height="{{.Height}}" data-count="{{.Count}}"></rect>{{end -}}
</g>
{{- end}}
</svg>
<p class="note">Requests and DNS queries per {{.BucketSeconds}} s, from {{.From}} to {{.To}}; bar heights against the busiest interval ({{digits .Max}}).</p>
{{- else}}
<p class="empty">No timed requests or DNS queries.</p>
{{- end}}
<h2>Targets by attempts</h2>
{{- with .Hosts}}
<div class="legend"><span><span class="sw a"></span>allowed</span><span><span class="sw b"></span>blocked</span><span><span class="sw i"></span>intercepted</span></div>
<svg class="hosts" role="img" aria-label="attempts per target" viewBox="0 0 {{.Width}} {{.Height}}" width="{{.Width}}" height="{{.Height}}" data-max="{{.Max}}" data-bar-length="{{.BarLength}}">
{{- range .Bars}}
<g class="target" data-host="{{.Host}}" data-port="{{.Port}}" data-allowed="{{.Allowed}}" data-blocked="{{.Blocked}}" data-intercepted="{{.Intercepted}}"><title>{{.Title}}</title>
<text class="label" x="{{$.Hosts.LabelX}}" y="{{.LabelY}}" text-anchor="end">{{.Label}}</text>
{{- range .Rects}}<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.Width}}" height="{{.Height}}" data-count="{{.Count}}"></rect>{{end}}
<text x="{{.TextX}}" y="{{.LabelY}}">{{.Total}}</text></g>
{{- end}}
</svg>
{{- if .More}}
<p class="note" data-more-targets="{{.More}}">{{digits .More}} more targets, with {{digits .MoreAttempts}} attempts in all, are not drawn: the chart shows the {{len .Bars}} with the most attempts. The table below lists every target.</p>
{{- end}}
{{- else}}
<p class="empty">No requests.</p>
{{- end}}
<h2>Targets</h2>
{{- if .Targets}}
<div class="scroll"><table class="targets">
<thead><tr><th>Host</th><th class="num">Port</th><th>Kinds</th><th>Methods</th><th>Top paths</th><th class="num">Allowed</th><th class="num">Blocked</th><th class="num">Intercepted</th><th class="num">Out</th><th class="num">In</th><th>First seen</th><th>Last seen</th><th>Rules</th><th>Processes</th></tr></thead>
<tbody>
{{- range .Targets}}
<tr><td class="host">{{.Host}}</td><td class="num">{{.Port}}</td><td>{{.Kinds}}</td><td class="s">{{.Methods}}</td><td class="s wide">
{{- if .Paths}}<ul class="paths">{{range .Paths}}<li>{{.}}</li>{{end}}{{if .MorePaths}}<li class="note">{{.MorePaths}}</li>{{end}}</ul>{{else if .MorePaths}}<span class="note">{{.MorePaths}}</span>{{end -}}
</td>{{template "counts" .Counts}}<td class="num">{{.BytesOut}}</td><td class="num">{{.BytesIn}}</td><td class="t">{{.First}}</td><td class="t">{{.Last}}</td><td class="s">{{.Rules}}{{if .InterceptStatus}} (answered {{.InterceptStatus}}){{end}}</td><td class="s">{{.Processes}}</td></tr>
{{- end}}
</tbody></table></div>
{{- else}}
<p class="empty">No requests.</p>
{{- end}}
<h2>DNS names</h2>
{{- if .DNS}}
<div class="scroll"><table class="dns">
<thead><tr><th>Name</th><th>Types</th><th class="num">Allowed</th><th class="num">Blocked</th><th class="num">Intercepted</th><th>First seen</th><th>Last seen</th><th>Processes</th></tr></thead>
<tbody>
{{- range .DNS}}
<tr><td class="host">{{.Name}}</td><td>{{.Types}}</td>{{template "counts" .Counts}}<td class="t">{{.First}}</td><td class="t">{{.Last}}</td><td class="s">{{.Processes}}</td></tr>
{{- end}}
</tbody></table></div>
{{- else}}
<p class="empty">No DNS queries.</p>
{{- end}}
<h2>Packets around the gateway</h2>
{{- if .Bypass}}
<div class="scroll"><table class="bypass">
<thead><tr><th>Protocol</th><th>Host</th><th class="num">Port</th><th class="num">Packets</th><th class="num">Records</th><th>First seen</th><th>Last seen</th><th>Processes</th></tr></thead>
<tbody>
{{- range .Bypass}}
<tr><td>{{.Proto}}</td><td class="host">{{.Host}}</td><td class="num">{{.Port}}</td><td class="num b">{{digits .Packets}}</td><td class="num">{{digits .Records}}</td><td class="t">{{.First}}</td><td class="t">{{.Last}}</td><td class="s">{{.Processes}}</td></tr>
{{- end}}
</tbody></table></div>
{{- else}}
<p class="empty">No packets went around the gateway.</p>
{{- end}}
<h2>Processes</h2>
{{- if .Processes}}
<div class="scroll"><table class="processes">
<thead><tr><th>Command</th><th>Executable</th><th class="num">Allowed</th><th class="num">Blocked</th><th class="num">Intercepted</th><th class="num">Targets</th><th class="num">PIDs</th></tr></thead>
<tbody>
{{- range .Processes}}
<tr><td class="host">{{.Comm}}</td><td class="s">{{.Exe}}</td>{{template "counts" .Counts}}<td class="num">{{.Targets}}</td><td class="num">{{.PIDs}}</td></tr>
{{- end}}
</tbody></table></div>
{{- else}}
<p class="empty">The log names no process.</p>
{{- end}}
<h2>Policy changes</h2>
{{- if .Changes}}
<div class="scroll"><table class="changes">
<thead><tr><th>Time</th><th class="num">Version</th><th>Change</th></tr></thead>
<tbody>
{{- range .Changes}}
<tr><td class="t">{{.Time}}</td><td class="num">{{.Version}}</td><td class="s">{{.Change}}</td></tr>
{{- end}}
</tbody></table></div>
{{- else}}
<p class="empty">No policy changes.</p>
{{- end}}
</main>
</body>
</html>
{{- define "counts"}}<td class="num{{if .Allowed}} a{{else}} zero{{end}}">{{digits .Allowed}}</td><td class="num{{if .Blocked}} b{{else}} zero{{end}}">{{digits .Blocked}}{{if .Unenforced}} ({{digits .Unenforced}} let through){{end}}</td><td class="num{{if .Intercepted}} i{{else}} zero{{end}}">{{digits .Intercepted}}</td>{{end}}
`
