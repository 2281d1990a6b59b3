package audit

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"golang.org/x/net/html"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// htmlTestStart is when the records of htmlTestRecords begin.
var htmlTestStart = time.Date(2025, 3, 14, 9, 26, 0, 0, time.UTC)

// htmlTestRecords are a sandbox's records over ten minutes: plain HTTP,
// CONNECT and transparent attempts at several hosts (allowed, blocked and
// intercepted), their close records, DNS queries, bypass packets, a
// refused client, a policy change and dropped records.
func htmlTestRecords() []*decisionlog.Record {
	var recs []*decisionlog.Record
	at := func(sec int) time.Time { return htmlTestStart.Add(time.Duration(sec) * time.Second) }
	dec := func(sec int, kind, method, host string, port int, path, action, rule string) *decisionlog.Record {
		r := &decisionlog.Record{
			Event: decisionlog.EventDecision, Time: at(sec), Sandbox: "sb1", Client: "10.88.0.2:40000",
			Kind: kind, Method: method, Host: host, Port: port, Path: path,
			Action: action, Enforced: true, Rule: rule, PID: 1000 + sec%3, Comm: "node", Exe: "/usr/bin/node",
		}
		recs = append(recs, r)
		return r
	}
	closed := func(d *decisionlog.Record, out, in int64) {
		c := *d
		c.Event, c.Time, c.BytesOut, c.BytesIn, c.Status = decisionlog.EventClose, d.Time.Add(time.Second), out, in, 200
		recs = append(recs, &c)
	}
	for i := range 40 {
		d := dec(i*15, decisionlog.KindConnect, "CONNECT", "api.github.com", 443, "", "allow", "gh")
		closed(d, 900, 12_000)
	}
	for i := range 25 {
		paths := []string{"/index.html", "/a.js", "/b.css", "/c.png", "/robots.txt"}
		action, rule := "allow", "web"
		if i%5 == 4 {
			action, rule = "block", "default"
		}
		d := dec(30+i*20, decisionlog.KindHTTP, []string{"GET", "POST"}[i%2], "example.org", 80, paths[i%len(paths)], action, rule)
		if action == "allow" {
			closed(d, 300, 5_000)
		}
	}
	for i := range 12 {
		dec(100+i*30, decisionlog.KindTransparent, "", "203.0.113.9", 22, "", "block", "default").Comm = "ssh"
	}
	for i := range 8 {
		r := dec(200+i*40, decisionlog.KindHTTP, "POST", "llm.example", 80, "/v1/messages", "intercept", "mock")
		r.Status = 200
	}
	for i := range 6 {
		dec(50+i*90, decisionlog.KindConnect, "CONNECT", "pastebin.com", 443, "", "block", "default").Comm = "curl"
	}
	for i := range 20 {
		name, action := "api.github.com", "allow"
		if i%4 == 3 {
			name, action = "evil.example", "block"
		}
		dec(i*29, decisionlog.KindDNS, []string{"A", "AAAA"}[i%2], name, 53, "", action, "dns")
	}
	for i := range 3 {
		r := dec(400+i*60, decisionlog.KindBypass, "", "8.8.8.8", 53, "", "block", "guard")
		r.Proto, r.Count, r.Comm = "udp", 5, "dig"
	}
	recs = append(recs,
		&decisionlog.Record{Event: decisionlog.EventDecision, Time: at(10), Kind: decisionlog.KindConn, Action: "block", Rule: "guard"},
		&decisionlog.Record{Event: decisionlog.EventPolicy, Time: at(300), PolicyVersion: 2, Change: "rule web added"},
		&decisionlog.Record{Event: decisionlog.EventDropped, Time: at(590), Since: at(580), Count: 7, Reason: "log budget"},
	)
	return recs
}

// htmlTestReport is the report of htmlTestRecords.
func htmlTestReport() *Report {
	s := NewSummary(Limits{})
	s.AddLog("sb1.jsonl")
	for _, r := range htmlTestRecords() {
		s.Add(r)
	}
	return s.Report()
}

// hostile are strings a sandbox can put in its log, to try to break out of
// the page.
var hostile = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(1)>`,
	`'onmouseover='alert(1)`,
	`javascript:alert(1)`,
	`</title><script>alert(2)</script>`,
	`</style><link rel=stylesheet href=http://evil.example/x.css>`,
	`url(http://evil.example/x.png)`,
	"esc\x1b[31mred\x07bell\x00nul",
	"gro\u202eup.exe",
	"cr\rlf\nend",
}

// hostileReport is a report whose every string comes from hostile.
func hostileReport() *Report {
	s := NewSummary(Limits{})
	for i, h := range hostile {
		s.AddLog(h)
		t := htmlTestStart.Add(time.Duration(i) * time.Minute)
		s.Add(&decisionlog.Record{Event: decisionlog.EventDecision, Time: t, Sandbox: h, Kind: decisionlog.KindHTTP, Method: h, Host: h, Port: 80, Path: h, Action: "block", Rule: h, PID: 7, Comm: h, Exe: h})
		s.Add(&decisionlog.Record{Event: decisionlog.EventDecision, Time: t, Kind: decisionlog.KindDNS, Method: h, Host: h, Action: "allow", PID: 7, Comm: h})
		s.Add(&decisionlog.Record{Event: decisionlog.EventDecision, Time: t, Kind: decisionlog.KindBypass, Proto: h, Host: h, Port: 9, Action: "block", Count: 1})
		s.Add(&decisionlog.Record{Event: decisionlog.EventPolicy, Time: t, PolicyVersion: uint64(i), Change: h})
	}
	return s.Report()
}

func renderHTML(t *testing.T, rep *Report) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHTML(&b, rep); err != nil {
		t.Fatalf("WriteHTML: %v", err)
	}
	return b.Bytes()
}

func parseHTML(t *testing.T, page []byte) *html.Node {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("parsing the page: %v", err)
	}
	return doc
}

// walk calls fn with n and every node under it, in document order.
func walk(n *html.Node, fn func(*html.Node)) {
	fn(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, fn)
	}
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func hasClass(n *html.Node, class string) bool {
	v, _ := attr(n, "class")
	return slices.Contains(strings.Fields(v), class)
}

// elements returns the elements named tag with class (any class when
// class is "").
func elements(doc *html.Node, tag, class string) []*html.Node {
	var out []*html.Node
	walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == tag && (class == "" || hasClass(n, class)) {
			out = append(out, n)
		}
	})
	return out
}

func textOf(n *html.Node) string {
	var b strings.Builder
	walk(n, func(c *html.Node) {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	})
	return b.String()
}

// urlAttrs are the attributes that make a browser fetch or navigate.
var urlAttrs = []string{"src", "href", "srcset", "action", "formaction", "poster", "background", "data", "codebase", "cite", "longdesc", "manifest", "ping", "xlink:href"}

// checkSelfContained fails t unless page loads nothing and runs nothing.
func checkSelfContained(t *testing.T, page []byte) {
	t.Helper()
	if i := bytes.Index(bytes.ToLower(page), []byte("<script")); i >= 0 {
		t.Errorf("page has <script at byte %d: %q", i, page[max(i-40, 0):min(i+80, len(page))])
	}
	doc := parseHTML(t, page)
	csp := false
	walk(doc, func(n *html.Node) {
		if n.Type != html.ElementNode {
			return
		}
		switch n.Data {
		case "script", "iframe", "frame", "object", "embed", "img", "image", "use", "base", "form", "audio", "video", "source", "track", "foreignObject", "foreignobject", "a", "input", "button":
			t.Errorf("page has a <%s> element", n.Data)
		case "meta":
			if v, _ := attr(n, "http-equiv"); strings.EqualFold(v, "content-security-policy") {
				c, _ := attr(n, "content")
				if want := "default-src 'none'; style-src 'unsafe-inline'; img-src data:"; c != want {
					t.Errorf("got Content-Security-Policy %q, want %q", c, want)
				}
				csp = true
			}
			if v, _ := attr(n, "http-equiv"); strings.EqualFold(v, "refresh") {
				t.Errorf("page has a meta refresh")
			}
		case "style":
			css := strings.ToLower(textOf(n))
			for _, bad := range []string{"url(", "@import", "expression(", "\\"} {
				if strings.Contains(css, bad) {
					t.Errorf("style sheet has %q", bad)
				}
			}
		}
		for _, a := range n.Attr {
			key := strings.ToLower(a.Key)
			if a.Namespace != "" {
				key = a.Namespace + ":" + key
			}
			if slices.Contains(urlAttrs, key) && !strings.HasPrefix(a.Val, "data:") {
				t.Errorf("<%s %s=%q>: got a URL that is not data:, want none", n.Data, a.Key, a.Val)
			}
			if key == "style" || strings.HasPrefix(key, "on") {
				t.Errorf("<%s> has attribute %s=%q, want none", n.Data, a.Key, a.Val)
			}
		}
	})
	if !csp {
		t.Errorf("page has no Content-Security-Policy meta element")
	}
	icons := 0
	for _, l := range elements(doc, "link", "") {
		rel, _ := attr(l, "rel")
		href, _ := attr(l, "href")
		if rel != "icon" || href != "data:," {
			t.Errorf(`got <link rel=%q href=%q>, want only <link rel="icon" href="data:,">`, rel, href)
		}
		icons++
	}
	if icons != 1 {
		t.Errorf("got %d icon links, want 1", icons)
	}
}

func TestWriteHTMLSelfContained(t *testing.T) {
	tests := []struct {
		name string
		rep  *Report
	}{
		{"empty", NewSummary(Limits{}).Report()},
		{"sample", htmlTestReport()},
		{"hostile", hostileReport()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := renderHTML(t, tt.rep)
			checkSelfContained(t, page)
			checkReportDOM(t, parseHTML(t, page), tt.rep)
		})
	}
}

func TestWriteHTMLEscapesLogStrings(t *testing.T) {
	rep := hostileReport()
	page := renderHTML(t, rep)
	for _, bad := range []string{"<script", "<img", "<link rel=stylesheet", "</style><", "</title><script", "\x1b", "\x07", "\x00", "\r", "\u202e"} {
		if bytes.Contains(page, []byte(bad)) {
			t.Errorf("page has %q, want it escaped", bad)
		}
	}
	doc := parseHTML(t, page)
	// Each string from the log shows as the text it is, with its hidden
	// characters as escapes: in the targets, DNS, bypass, processes and
	// policy tables.
	for _, table := range []string{"targets", "dns", "bypass", "processes", "changes"} {
		tabs := elements(doc, "table", table)
		if len(tabs) != 1 {
			t.Fatalf("got %d tables of class %s, want 1", len(tabs), table)
		}
		var cells []string
		for _, td := range elements(tabs[0], "td", "") {
			cells = append(cells, textOf(td))
		}
		for _, h := range hostile {
			want := visible(h)
			if !slices.ContainsFunc(cells, func(c string) bool { return strings.Contains(c, want) }) {
				t.Errorf("table %s: no cell has %q, want one", table, want)
			}
		}
	}
	// The bars name their targets the same way, in data-host, the label
	// and the title.
	var hosts []string
	for _, g := range elements(doc, "g", "target") {
		h, _ := attr(g, "data-host")
		hosts = append(hosts, h)
		if title := textOf(elements(g, "title", "")[0]); !strings.Contains(title, h) {
			t.Errorf("bar title %q does not name host %q", title, h)
		}
	}
	var want []string
	for _, h := range hostile {
		want = append(want, visible(h))
	}
	slices.Sort(hosts)
	slices.Sort(want)
	if diff := gocmp.Diff(want, hosts); diff != "" {
		t.Errorf("data-host of the bars (-want +got):\n%s", diff)
	}
}

func TestWriteHTMLWarnings(t *testing.T) {
	full := func(lim Limits, recs ...*decisionlog.Record) *Report {
		s := NewSummary(lim)
		for _, r := range recs {
			s.Add(r)
		}
		return s.Report()
	}
	req := func(host string) *decisionlog.Record {
		return &decisionlog.Record{Event: decisionlog.EventDecision, Time: htmlTestStart, Kind: decisionlog.KindConnect, Method: "CONNECT", Host: host, Port: 443, Action: "allow", Enforced: true}
	}
	tests := []struct {
		name string
		rep  *Report
		want []string // data-warning values
	}{
		{"none", full(Limits{}, req("a.example")), nil},
		{"dropped", full(Limits{}, req("a.example"), &decisionlog.Record{Event: decisionlog.EventDropped, Count: 3}), []string{"dropped"}},
		{"overflow", full(Limits{Targets: 1}, req("a.example"), req("b.example")), []string{"overflow"}},
		{"audit mode", full(Limits{}, &decisionlog.Record{Event: decisionlog.EventDecision, Kind: decisionlog.KindHTTP, Method: "GET", Host: "a.example", Port: 80, Action: "block"}), []string{"unenforced"}},
		{"unknown kind", full(Limits{}, &decisionlog.Record{Event: decisionlog.EventDecision, Kind: "quic", Host: "a.example", Port: 443, Action: "allow"}), []string{"notice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := parseHTML(t, renderHTML(t, tt.rep))
			var got []string
			walk(doc, func(n *html.Node) {
				if w, ok := attr(n, "data-warning"); ok && n.Type == html.ElementNode {
					got = append(got, w)
				}
			})
			if diff := gocmp.Diff(tt.want, got); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if slices.Contains(got, "dropped") && !strings.Contains(textOf(doc), "The log is incomplete") {
				t.Errorf("page does not say the log is incomplete")
			}
		})
	}
}

func TestWriteHTMLManyTargets(t *testing.T) {
	s := NewSummary(Limits{})
	for i := range 60 {
		for range i + 1 {
			s.Add(&decisionlog.Record{Event: decisionlog.EventDecision, Time: htmlTestStart.Add(time.Duration(i) * time.Second), Kind: decisionlog.KindConnect, Method: "CONNECT", Host: fmt.Sprintf("h%02d.example", i), Port: 443, Action: "allow", Enforced: true})
		}
	}
	rep := s.Report()
	doc := parseHTML(t, renderHTML(t, rep))
	checkReportDOM(t, doc, rep)
	bars := elements(doc, "g", "target")
	if len(bars) != maxChartTargets {
		t.Errorf("got %d host bars, want %d", len(bars), maxChartTargets)
	}
	if h, _ := attr(bars[0], "data-host"); h != "h59.example" {
		t.Errorf("got first bar %q, want the largest target h59.example", h)
	}
	var more []string
	walk(doc, func(n *html.Node) {
		if v, ok := attr(n, "data-more-targets"); ok {
			more = append(more, v)
		}
	})
	if diff := gocmp.Diff([]string{"10"}, more); diff != "" {
		t.Errorf("data-more-targets (-want +got):\n%s", diff)
	}
	if rows := len(elements(elements(doc, "table", "targets")[0], "tr", "")) - 1; rows != 60 {
		t.Errorf("got %d rows in the targets table, want 60", rows)
	}
}

func TestHTMLVisible(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"api.github.com", "api.github.com"},
		{"ünïcödé.example", "ünïcödé.example"},
		{"a\x00b", `a\x00b`},
		{"a\x1b[31m", `a\x1b[31m`},
		{"a\r\nb\tc", `a\x0d\x0ab\x09c`},
		{"a\x7fb", `a\x7fb`},
		{"a\u0085b", `a\u0085b`},
		{"gro\u202eup.exe", `gro\u202eup.exe`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"line\u2028sep", `line\u2028sep`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"\ufeffbom", `\ufeffbom`},
	}
	for _, tt := range tests {
		if got := visible(tt.in); got != tt.want {
			t.Errorf("visible(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestHTMLDigits(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{0, "0"}, {7, "7"}, {999, "999"}, {1000, "1,000"}, {12345, "12,345"},
		{123456, "123,456"}, {1234567, "1,234,567"}, {math.MaxUint64, "18,446,744,073,709,551,615"},
	}
	for _, tt := range tests {
		if got := digits(tt.in); got != tt.want {
			t.Errorf("digits(%d): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

// jsonReport is rep as encoding/json writes it, decoded into generic
// values (numbers as json.Number), so that the page is compared with the
// JSON report and not with the Go values the page was made from.
func jsonReport(t *testing.T, rep *Report) map[string]any {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatalf("marshaling the report: %v", err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("decoding the report: %v", err)
	}
	return m
}

// jsonField is the value at a dotted path of m (requests.allowed) as a
// string, "0" for a number left out (omitempty).
func jsonField(m map[string]any, path string) string {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		o, _ := v.(map[string]any)
		v = o[k]
	}
	switch v := v.(type) {
	case nil:
		return "0"
	case json.Number:
		return v.String()
	case string:
		return v
	}
	return fmt.Sprint(v)
}

// barData are the data attributes of a chart bar.
type barData map[string]string

func dataAttrs(n *html.Node, keys ...string) barData {
	d := barData{}
	for _, k := range keys {
		if v, ok := attr(n, "data-"+k); ok {
			d[k] = v
		}
	}
	return d
}

// checkReportDOM fails t unless the charts and summary of doc, a page of
// rep, hold rep's numbers as its JSON says them, and each bar's length is
// its count against the chart's largest.
func checkReportDOM(t *testing.T, doc *html.Node, rep *Report) {
	t.Helper()
	j := jsonReport(t, rep)
	counts := []string{"allowed", "blocked", "intercepted"}

	// Timeline: one bar per bucket, in order.
	var wantBuckets, gotBuckets []barData
	tl, _ := j["timeline"].([]any)
	for _, b := range tl {
		b := b.(map[string]any)
		d := barData{"start": jsonField(b, "start")}
		for _, c := range counts {
			d[c] = jsonField(b, c)
		}
		wantBuckets = append(wantBuckets, d)
	}
	for _, g := range elements(doc, "g", "bucket") {
		gotBuckets = append(gotBuckets, dataAttrs(g, "start", "allowed", "blocked", "intercepted"))
	}
	if diff := gocmp.Diff(wantBuckets, gotBuckets); diff != "" {
		t.Errorf("timeline bars (-json report +page):\n%s", diff)
	}
	if svgs := elements(doc, "svg", "timeline"); len(svgs) == 1 {
		checkBarLengths(t, svgs[0], "bucket", "height", "data-plot-height")
	} else if len(tl) > 0 {
		t.Errorf("got %d timeline charts, want 1", len(svgs))
	}

	// Hosts: the largest targets first, at most maxChartTargets.
	type jt struct {
		d     barData
		total uint64
		host  string
		port  int
	}
	var ts []jt
	targets, _ := j["targets"].([]any)
	for _, x := range targets {
		x := x.(map[string]any)
		d := barData{"host": visible(jsonField(x, "host")), "port": jsonField(x, "port")}
		var total uint64
		for _, c := range counts {
			d[c] = jsonField(x, c)
			n, err := strconv.ParseUint(d[c], 10, 64)
			if err != nil {
				t.Fatalf("target %v: %s: %v", d, c, err)
			}
			total += n
		}
		port, _ := strconv.Atoi(d["port"])
		ts = append(ts, jt{d, total, jsonField(x, "host"), port})
	}
	slices.SortStableFunc(ts, func(a, b jt) int {
		return cmp.Or(cmp.Compare(b.total, a.total), strings.Compare(a.host, b.host), cmp.Compare(a.port, b.port))
	})
	var wantTargets, gotTargets []barData
	for i, x := range ts {
		if i == maxChartTargets {
			break
		}
		wantTargets = append(wantTargets, x.d)
	}
	for _, g := range elements(doc, "g", "target") {
		gotTargets = append(gotTargets, dataAttrs(g, "host", "port", "allowed", "blocked", "intercepted"))
	}
	if diff := gocmp.Diff(wantTargets, gotTargets); diff != "" {
		t.Errorf("host bars (-json report +page):\n%s", diff)
	}
	if svgs := elements(doc, "svg", "hosts"); len(svgs) == 1 {
		checkBarLengths(t, svgs[0], "target", "width", "data-bar-length")
	} else if len(ts) > 0 {
		t.Errorf("got %d host charts, want 1", len(svgs))
	}

	// Summary: every number the page marks with data-stat.
	seen := map[string]bool{}
	walk(doc, func(n *html.Node) {
		key, ok := attr(n, "data-stat")
		if !ok || n.Type != html.ElementNode || key == "span" {
			return
		}
		seen[key] = true
		val, _ := attr(n, "data-value")
		if want := jsonField(j, key); val != want {
			t.Errorf("summary %s: got %s, want %s", key, val, want)
		}
		if strings.HasPrefix(key, "bytes_") {
			return // shown in kB, MB
		}
		if got := strings.ReplaceAll(textOf(n), ",", ""); got != val {
			t.Errorf("summary %s: shows %q, want %s", key, textOf(n), val)
		}
	})
	for _, key := range []string{"records", "dropped", "requests.allowed", "requests.blocked", "requests.intercepted", "dns.allowed", "dns.blocked", "dns.intercepted", "bypass_packets", "bytes_out", "bytes_in", "refused_clients"} {
		if !seen[key] {
			t.Errorf("summary has no %s", key)
		}
	}
}

// checkBarLengths fails t unless each rect of the bars of class in svg
// is as long (dim: width or height) as its count against the chart's
// data-max, over the length the chart's lengthAttr gives, and the rects
// of a bar are one per nonzero count, in the order allowed, blocked,
// intercepted.
func checkBarLengths(t *testing.T, svg *html.Node, class, dim, lengthAttr string) {
	t.Helper()
	maxS, _ := attr(svg, "data-max")
	lenS, _ := attr(svg, lengthAttr)
	mx, err1 := strconv.ParseFloat(maxS, 64)
	length, err2 := strconv.ParseFloat(lenS, 64)
	if err1 != nil || err2 != nil || mx <= 0 || length <= 0 {
		t.Errorf("chart %s: got data-max %q and %s %q, want positive numbers", class, maxS, lengthAttr, lenS)
		return
	}
	var longest float64
	for _, g := range elements(svg, "g", class) {
		var wantClasses, gotClasses []string
		for _, c := range []struct{ attr, class string }{{"data-allowed", "a"}, {"data-blocked", "b"}, {"data-intercepted", "i"}} {
			if v, _ := attr(g, c.attr); v != "0" {
				wantClasses = append(wantClasses, c.class)
			}
		}
		var sum float64
		for _, r := range elements(g, "rect", "") {
			cl, _ := attr(r, "class")
			gotClasses = append(gotClasses, cl)
			n, _ := attr(r, "data-count")
			v, _ := attr(g, map[string]string{"a": "data-allowed", "b": "data-blocked", "i": "data-intercepted"}[cl])
			if n != v {
				t.Errorf("%s bar %v: rect %s counts %s, want %s", class, dataAttrs(g, "start", "host", "port"), cl, n, v)
			}
			count, _ := strconv.ParseFloat(n, 64)
			ds, _ := attr(r, dim)
			got, err := strconv.ParseFloat(ds, 64)
			if want := count / mx * length; err != nil || math.Abs(got-want) > 0.01 {
				t.Errorf("%s bar %v: rect %s %s: got %s, want %.3f", class, dataAttrs(g, "start", "host", "port"), cl, dim, ds, want)
			}
			sum += got
		}
		if diff := gocmp.Diff(wantClasses, gotClasses); diff != "" {
			t.Errorf("%s bar %v: rects (-want +got):\n%s", class, dataAttrs(g, "start", "host", "port"), diff)
		}
		longest = max(longest, sum)
	}
	if math.Abs(longest-length) > 0.01 {
		t.Errorf("chart %s: longest bar is %.3f, want %.0f (the largest count fills the chart)", class, longest, length)
	}
}
