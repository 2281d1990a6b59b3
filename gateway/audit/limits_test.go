package audit

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// stringBytes sums the lengths of the strings v holds, map keys included,
// and returns the longest.
func stringBytes(v reflect.Value) (total, longest int) {
	add := func(t, l int) {
		total += t
		longest = max(longest, l)
	}
	switch v.Kind() {
	case reflect.String:
		add(v.Len(), v.Len())
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			add(stringBytes(v.Elem()))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			add(stringBytes(v.Field(i)))
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			add(stringBytes(v.Index(i)))
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			add(stringBytes(it.Key()))
			add(stringBytes(it.Value()))
		}
	}
	return total, longest
}

// TestLongStringsAreBounded: the limits count entries; the strings a
// report keeps are cut too, so a log of huge strings is read, and
// written, in bounded memory.
func TestLongStringsAreBounded(t *testing.T) {
	const n, size = 300, 100 << 10
	big := strings.Repeat("a", size)
	s := NewSummary(Limits{})
	var few []decisionlog.Record
	for i := range n {
		host := fmt.Sprintf("h%03d.%s", i, big) // distinct in its first bytes
		huge := func(r *decisionlog.Record) {
			r.Comm, r.PID, r.Exe, r.Sandbox, r.Rule, r.Reason = host, 7, big, host, host, big
		}
		recs := []decisionlog.Record{
			{V: 1, Event: decisionlog.EventPolicy, Time: t0, PolicyVersion: 1, Change: host},
			rec(i, "http", host, host, 80, "/"+big, "allow", "r", huge),
			rec(i, "http", "GET", "a.example", 80, "/"+host, "allow", "r", huge),
			rec(i, host, "GET", "b.example", 80, "/", "allow", "r", huge),
			rec(i, "dns", host, host, 53, "", "allow", "r", huge),
			rec(i, "bypass", "", host, 9, "", "block", "guard", huge, func(r *decisionlog.Record) { r.Proto, r.Count = host, 1 }),
		}
		for j := range recs {
			s.Add(&recs[j])
		}
		if i < 8 {
			few = append(few, recs...)
		}
	}
	rep := s.Report()
	total, longest := stringBytes(reflect.ValueOf(rep))
	if total > 4<<20 || longest > maxPathString+32 {
		t.Errorf("the report keeps %d bytes of strings, the longest %d bytes; want at most 4 MiB and %d (the log has %d MiB)",
			total, longest, maxPathString+32, n*size*12>>20)
	}
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Host, "h0") && (validTarget(tg.Host, tg.Port) || !strings.HasSuffix(tg.Host, fmt.Sprintf("…(%d bytes)", size+5))) {
			t.Errorf("a cut host is %q..., valid %v; want it marked with its length and invalid", tg.Host[:16], validTarget(tg.Host, tg.Port))
			break
		}
	}
	for _, f := range []string{FormatText, FormatMarkdown, FormatJSON} {
		var b bytes.Buffer
		if err := WriteReport(&b, rep, f); err != nil {
			t.Fatal(err)
		}
		if b.Len() > 8<<20 {
			t.Errorf("the %s report is %d bytes, want at most 8 MiB", f, b.Len())
		}
		if f == FormatText {
			for _, line := range strings.Split(b.String(), "\n") {
				if len(line) > 2000 {
					t.Errorf("a line of the text report is %d bytes long, want at most 2000: %.80q", len(line), line)
					break
				}
			}
		}
	}
	if _, err := Suggest(rep, SuggestOptions{}); err != nil {
		t.Errorf("Suggest: %v", err)
	}
	e, err := Expect(context.Background(), mustPolicy(t, "version: 1\nrules: []\n"), "none", logSource(few), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if total, longest := stringBytes(reflect.ValueOf(e)); total > 1<<20 || longest > maxLoggedPath+32 {
		t.Errorf("the expectation keeps %d bytes of strings, the longest %d; want at most 1 MiB and %d", total, longest, maxLoggedPath+32)
	}
}

// TestTruncatedTail: a log whose last line was cut short (a running
// sandbox's, or one whose gateway stopped mid-record) is read, and said
// to be incomplete: the report warns, --expect does not hold and --diff
// reaches new.
func TestTruncatedTail(t *testing.T) {
	recs := sampleLog()
	src := logSource(recs)
	var b bytes.Buffer
	for i := range recs {
		b.Write(recs[i].AppendJSON(nil))
		b.WriteByte('\n')
	}
	b.WriteString(`{"v":1,"seq":99,"event":"decision","kind":"con`)
	data := b.Bytes()
	cut := []Source{{Name: "running.jsonl", Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}}
	want := fmt.Sprintf("running.jsonl:%d, the log's last line, ends without a newline and is not a whole record: the log is still being written (a running sandbox) or its gateway stopped", len(recs)+1)

	s, err := Summarize(context.Background(), cut, Limits{})
	if err != nil {
		t.Fatalf("Summarize: %v", err)
	}
	rep := s.Report()
	if rep.Records != uint64(len(recs)) || len(rep.Truncated) != 1 || !strings.HasPrefix(rep.Truncated[0], want) {
		t.Errorf("got %d records, truncated %q; want %d and %q", rep.Records, rep.Truncated, len(recs), want)
	}
	var text bytes.Buffer
	if err := WriteReport(&text, rep, FormatText); err != nil || !strings.Contains(text.String(), "WARNING: "+want) {
		t.Errorf("the text report does not warn of the cut line (%v):\n%s", err, text.String())
	}

	open := mustPolicy(t, "version: 1\ndefault: allow\nrules: []\n")
	e, err := Expect(context.Background(), open, "open", cut, Limits{})
	if err != nil {
		t.Fatalf("Expect: %v", err)
	}
	if e.Holds() || len(e.Truncated) != 1 {
		t.Errorf("got holds %v, truncated %q; want false and the cut line", e.Holds(), e.Truncated)
	}
	if e, err := Expect(context.Background(), open, "open", src, Limits{}); err != nil || len(e.Truncated) != 0 {
		t.Errorf("the whole log: got truncated %q, %v; want none", e.Truncated, err)
	}
	var out bytes.Buffer
	if err := WriteExpectation(&out, e, FormatText); err != nil || !strings.Contains(out.String(), want) {
		t.Errorf("the expectation does not say the log was cut (%v):\n%s", err, out.String())
	}

	whole, err := Summarize(context.Background(), src, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if d := DiffReports(whole.Report(), rep, 10); !d.ReachesNew() || len(d.Incomplete) != 1 || !strings.Contains(d.Incomplete[0], want) {
		t.Errorf("diff against a cut log: got reaches new %v, incomplete %q; want true and the cut line", d.ReachesNew(), d.Incomplete)
	}
}

// TestCountsSaturate: a log can claim any count or byte total; sums stop
// at the largest value instead of wrapping, negative bytes add nothing,
// and a port that is not one is 0.
func TestCountsSaturate(t *testing.T) {
	huge := func(r *decisionlog.Record) { r.BytesOut, r.BytesIn = math.MaxInt64, -5 }
	packets := func(r *decisionlog.Record) { r.Proto, r.Count = "udp", math.MaxUint64 }
	recs := []decisionlog.Record{
		rec(1, "connect", "CONNECT", "a.example", 443, "", "allow", "r", closed(0, 0), huge),
		rec(2, "connect", "CONNECT", "a.example", 443, "", "allow", "r", closed(0, 0), huge),
		rec(3, "bypass", "", "192.0.2.1", 53, "", "block", "guard", packets),
		rec(4, "bypass", "", "192.0.2.1", 53, "", "block", "guard", packets),
		{V: 1, Event: decisionlog.EventDropped, Time: t0, Count: math.MaxUint64},
		{V: 1, Event: decisionlog.EventDropped, Time: t0, Count: math.MaxUint64},
		rec(5, "connect", "CONNECT", "b.example", -5, "", "block", "invalid"),
		rec(6, "connect", "CONNECT", "b.example", 1<<20, "", "block", "invalid"),
	}
	rep := summarize(t, recs)
	if rep.BytesOut != math.MaxInt64 || rep.BytesIn != 0 || rep.BypassPackets != math.MaxUint64 || rep.Dropped != math.MaxUint64 {
		t.Errorf("got bytes %d out, %d in, %d packets, %d dropped; want the largest values and 0 in", rep.BytesOut, rep.BytesIn, rep.BypassPackets, rep.Dropped)
	}
	var ports []int
	for _, tg := range rep.Targets {
		ports = append(ports, tg.Port)
		if tg.BytesOut < 0 || tg.BytesIn < 0 {
			t.Errorf("%s: got bytes %d out, %d in; want neither negative", tg.Host, tg.BytesOut, tg.BytesIn)
		}
	}
	if want := []int{443, 0}; !cmp.Equal(ports, want) {
		t.Errorf("got ports %v, want %v", ports, want)
	}
	if len(rep.Bypass) != 1 || rep.Bypass[0].Packets != math.MaxUint64 {
		t.Errorf("got bypass rows %+v, want one of the largest count", rep.Bypass)
	}
	e, err := Expect(context.Background(), mustPolicy(t, "version: 1\nrules: []\n"), "none", logSource(recs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if e.Attempts != math.MaxUint64 || e.Dropped != math.MaxUint64 {
		t.Errorf("got %d attempts, %d dropped; want the largest count", e.Attempts, e.Dropped)
	}
}

// TestInterceptStatusIgnoresOrder: the status a target's intercepts were
// answered with is the highest, whatever the order of the records.
func TestInterceptStatusIgnoresOrder(t *testing.T) {
	a := rec(1, "http", "GET", "i.example", 80, "/", "intercept", "r", func(r *decisionlog.Record) { r.Status = 503 })
	b := rec(2, "http", "GET", "i.example", 80, "/", "intercept", "r", func(r *decisionlog.Record) { r.Status = 204 })
	for _, recs := range [][]decisionlog.Record{{a, b}, {b, a}} {
		if got := summarize(t, recs).Targets[0].InterceptStatus; got != 503 {
			t.Errorf("got intercept status %d, want 503", got)
		}
	}
}

// TestValidTarget: validTarget agrees with the gateway's Decide on which
// targets are invalid whatever the policy.
func TestValidTarget(t *testing.T) {
	allow, err := netpolicy.Compile(netpolicy.Spec{Default: netpolicy.Allow})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"a.example", "A.Example.", "127.1", "10.0.0.1", "::1", "[::1]", "fe80::1%eth0", "a b", "", "a..b", "xn--nxasmq6b", "é.example", "*.example", strings.Repeat("a", 300)} {
		for _, p := range []int{0, 1, 443, 65535, 65536, -1} {
			want := allow.Decide(netpolicy.Target{Host: host, Port: port(p), Method: "CONNECT"}).Rule != netpolicy.RuleInvalid
			if got := validTarget(host, p); got != want {
				t.Errorf("validTarget(%q, %d): got %v, want %v (as Decide)", host, p, got, want)
			}
		}
	}
}
