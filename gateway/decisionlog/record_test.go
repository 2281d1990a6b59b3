package decisionlog

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// dlTestTime is not in UTC, so the tests see the encoder convert it.
var dlTestTime = time.Date(2025, 3, 4, 5, 6, 7, 890123000, time.FixedZone("CET", 3600))

func TestRecordAppendJSON(t *testing.T) {
	decision := Record{
		Seq: 7, ID: "k3", Event: EventDecision, Time: dlTestTime, Sandbox: "a1b2",
		Client: "10.213.0.2:40000", Kind: KindHTTP, Method: "GET", Host: "example.com", Port: 80,
		Path: "/x", Action: "block", Enforced: true, Rule: "default",
		Reason: "no rule matches example.com:80", PolicyVersion: 3, Status: 403,
	}
	withError := decision
	withError.Error = "dial tcp: refused"
	guarded := decision
	guarded.Rule, guarded.Reason = "guard", ReasonGuard+"192.0.2.1 is documentation (TEST-NET-1)"
	guarded.Addrs, guarded.Error = "192.0.2.1,2001:db8::1", "x"
	closeRec := decision
	closeRec.Event, closeRec.Action, closeRec.Rule, closeRec.Status = EventClose, "allow", "r1", 200
	closeRec.Upstream, closeRec.BytesOut, closeRec.BytesIn = "93.184.216.34:80", 120, 4567
	closeRec.Duration = 12345678 * time.Nanosecond
	tests := []struct {
		name string
		rec  Record
		want string
	}{
		{
			name: "decision",
			rec:  decision,
			want: `{"v":1,"seq":7,"id":"k3","event":"decision","time":"2025-03-04T04:06:07.890123Z",` +
				`"sandbox":"a1b2","client":"10.213.0.2:40000","kind":"http","method":"GET","host":"example.com",` +
				`"port":80,"path":"/x","action":"block","enforced":true,"rule":"default",` +
				`"reason":"no rule matches example.com:80","policy_version":3,"status":403}`,
		},
		{
			name: "decision with error",
			rec:  withError,
			want: `{"v":1,"seq":7,"id":"k3","event":"decision","time":"2025-03-04T04:06:07.890123Z",` +
				`"sandbox":"a1b2","client":"10.213.0.2:40000","kind":"http","method":"GET","host":"example.com",` +
				`"port":80,"path":"/x","action":"block","enforced":true,"rule":"default",` +
				`"reason":"no rule matches example.com:80","policy_version":3,"status":403,"error":"dial tcp: refused"}`,
		},
		{
			name: "guard with addrs",
			rec:  guarded,
			want: `{"v":1,"seq":7,"id":"k3","event":"decision","time":"2025-03-04T04:06:07.890123Z",` +
				`"sandbox":"a1b2","client":"10.213.0.2:40000","kind":"http","method":"GET","host":"example.com",` +
				`"port":80,"path":"/x","action":"block","enforced":true,"rule":"guard",` +
				`"reason":"address guard: 192.0.2.1 is documentation (TEST-NET-1)","policy_version":3,"status":403,` +
				`"addrs":"192.0.2.1,2001:db8::1","error":"x"}`,
		},
		{
			name: "close",
			rec:  closeRec,
			want: `{"v":1,"seq":7,"id":"k3","event":"close","time":"2025-03-04T04:06:07.890123Z",` +
				`"sandbox":"a1b2","client":"10.213.0.2:40000","kind":"http","method":"GET","host":"example.com",` +
				`"port":80,"path":"/x","action":"allow","enforced":true,"rule":"r1",` +
				`"reason":"no rule matches example.com:80","policy_version":3,"status":200,` +
				`"upstream":"93.184.216.34:80","bytes_out":120,"bytes_in":4567,"duration_ms":12.345678}`,
		},
		{
			name: "policy",
			rec:  Record{Seq: 9, Event: EventPolicy, Time: dlTestTime, PolicyVersion: 4, Change: "rule gh added", Host: "ignored", Error: "ignored"},
			want: `{"v":1,"seq":9,"event":"policy","time":"2025-03-04T04:06:07.890123Z","policy_version":4,"change":"rule gh added"}`,
		},
		{
			name: "dropped",
			rec: Record{
				Seq: 20001, Event: EventDropped, Time: dlTestTime, Since: dlTestTime.Add(-1500 * time.Millisecond),
				Count: 5000, Reason: "over the rate limit", Host: "ignored", Error: "ignored",
			},
			want: `{"v":1,"seq":20001,"event":"dropped","time":"2025-03-04T04:06:07.890123Z",` +
				`"since":"2025-03-04T04:06:06.390123Z","count":5000,"reason":"over the rate limit"}`,
		},
		{
			name: "zero",
			rec:  Record{},
			want: `{"v":1,"seq":0,"id":"","event":"","time":"0001-01-01T00:00:00Z","sandbox":"","client":"",` +
				`"kind":"","method":"","host":"","port":0,"path":"","action":"","enforced":false,"rule":"",` +
				`"reason":"","policy_version":0,"status":0}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(tt.rec.AppendJSON([]byte("prefix")))
			if got != "prefix"+tt.want {
				t.Errorf("AppendJSON:\ngot  %s\nwant prefix%s", got, tt.want)
			}
			if !json.Valid([]byte(tt.want)) {
				t.Errorf("want is not valid JSON: %s", tt.want)
			}
		})
	}
}

// dlWantKeys returns the keys, in order, that docs/decision-log.md gives a record
// of event.
func dlWantKeys(event string, hasError bool) []string {
	switch event {
	case EventPolicy:
		return []string{FieldV, FieldSeq, FieldEvent, FieldTime, FieldPolicyVersion, FieldChange}
	case EventDropped:
		return []string{FieldV, FieldSeq, FieldEvent, FieldTime, FieldSince, FieldCount, FieldReason}
	}
	keys := []string{
		FieldV, FieldSeq, FieldID, FieldEvent, FieldTime, FieldSandbox, FieldClient, FieldKind,
		FieldMethod, FieldHost, FieldPort, FieldPath, FieldAction, FieldEnforced, FieldRule,
		FieldReason, FieldPolicyVersion, FieldStatus,
	}
	if event == EventClose {
		keys = append(keys, FieldUpstream, FieldBytesOut, FieldBytesIn, FieldDurationMS)
	}
	if hasError {
		keys = append(keys, FieldError)
	}
	return keys
}

// dlLineKeys returns the keys of the JSON object in line, in order and
// with repeats, and fails when line is not exactly one JSON object.
func dlLineKeys(t testing.TB, line []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("line %q: got first token %v, %v, want {", line, tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("line %q: value of %q: %v", line, tok, err)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		t.Fatalf("line %q: got last token %v, %v, want }", line, tok, err)
	}
	if _, err := dec.Token(); err == nil {
		t.Fatalf("line %q: more after the object", line)
	}
	return keys
}

func TestRecordKeys(t *testing.T) {
	tests := []struct {
		event    string
		errorMsg string
	}{
		{EventDecision, ""},
		{EventDecision, "x"},
		{EventClose, ""},
		{EventClose, "upstream reset"},
		{EventPolicy, ""},
		{EventPolicy, "not written"},
		{EventDropped, ""},
		{EventDropped, "not written"},
		{"", ""},
		{"future", "x"},
	}
	for _, tt := range tests {
		rec := Record{Event: tt.event, Error: tt.errorMsg, Time: dlTestTime}
		got := dlLineKeys(t, rec.AppendJSON(nil))
		want := dlWantKeys(tt.event, tt.errorMsg != "" && tt.event != EventPolicy && tt.event != EventDropped)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("event %q, error %q: keys (-want +got):\n%s", tt.event, tt.errorMsg, diff)
		}
	}
}

func TestRecordTime(t *testing.T) {
	tests := []struct {
		in   time.Time
		want string
	}{
		{dlTestTime, "2025-03-04T04:06:07.890123Z"},
		{time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC), "2025-01-02T03:04:05.123456789Z"},
		{time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("X", -7*3600)), "2025-01-02T10:04:05Z"},
		{time.Date(2025, 1, 2, 3, 4, 5, 1, time.Local), time.Date(2025, 1, 2, 3, 4, 5, 1, time.Local).UTC().Format(time.RFC3339Nano)},
	}
	for _, tt := range tests {
		rec := Record{Event: EventPolicy, Time: tt.in}
		var got struct{ Time string }
		if err := json.Unmarshal(rec.AppendJSON(nil), &got); err != nil {
			t.Fatal(err)
		}
		if got.Time != tt.want {
			t.Errorf("time %v: got %q, want %q", tt.in, got.Time, tt.want)
		}
		parsed, err := time.Parse(time.RFC3339Nano, got.Time)
		if err != nil || !parsed.Equal(tt.in) || parsed.Location() != time.UTC {
			t.Errorf("time %v: got %q parsed as %v, %v, want the same instant in UTC", tt.in, got.Time, parsed, err)
		}
	}
}

// dlStdJSONString encodes s as encoding/json does with HTML escaping off.
func dlStdJSONString(t testing.TB, s string) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func TestAppendJSONString(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", `""`},
		{"example.com", `"example.com"`},
		{`say "hi"`, `"say \"hi\""`},
		{`C:\dir`, `"C:\\dir"`},
		{"a\nb\rc\td\be\ff", `"a\nb\rc\td\be\ff"`},
		{"\x00\x01\x1f", `"\u0000\u0001\u001f"`},
		{"\x7f", "\"\x7f\""},
		{"<a href='x'>&amp;</a>", `"<a href='x'>&amp;</a>"`},
		{"line\u2028para\u2029end", `"line\u2028para\u2029end"`},
		{"bücher.de ✓ 🙂", `"bücher.de ✓ 🙂"`},
		{"bad\xffbyte", `"bad\ufffdbyte"`},
		{"\xe2\x80", `"\ufffd\ufffd"`},           // truncated sequence: one U+FFFD per byte
		{"\xed\xa0\x80", `"\ufffd\ufffd\ufffd"`}, // an encoded surrogate is invalid
		{"\xc0\xaf", `"\ufffd\ufffd"`},           // overlong encoding
		{"\ufffd", "\"\ufffd\""},                 // a real U+FFFD stays as it is
	}
	for _, tt := range tests {
		got := string(appendJSONString(nil, tt.in))
		if got != tt.want {
			t.Errorf("appendJSONString(%q): got %s, want %s", tt.in, got, tt.want)
		}
		if std := dlStdJSONString(t, tt.in); got != std {
			t.Errorf("appendJSONString(%q): got %s, encoding/json gives %s", tt.in, got, std)
		}
	}
}

func TestAppendMillis(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0"},
		{time.Nanosecond, "0.000001"},
		{time.Microsecond, "0.001"},
		{time.Millisecond, "1"},
		{12345 * time.Microsecond, "12.345"},
		{12345678 * time.Nanosecond, "12.345678"},
		{1500 * time.Millisecond, "1500"},
		{10 * time.Minute, "600000"},
		{-1500 * time.Microsecond, "-1.5"},
		{math.MaxInt64, "9223372036854.775807"},
		{math.MinInt64, "-9223372036854.775808"},
	}
	for _, tt := range tests {
		if got := string(appendMillis(nil, tt.in)); got != tt.want {
			t.Errorf("appendMillis(%v): got %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestRecordAppendJSONAllocs(t *testing.T) {
	rec := dlBenchRecord()
	rec.Event, rec.Error = EventClose, "upstream \"reset\"\n"
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = rec.AppendJSON(buf[:0]) }); n != 0 {
		t.Errorf("AppendJSON: got %v allocations, want 0", n)
	}
}

// dlFixUTF8 replaces each byte of invalid UTF-8 in s by U+FFFD, as the
// encoder does.
func dlFixUTF8(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(r) // RuneError for an invalid byte, and n is 1
		i += n
	}
	return b.String()
}

// dlCheckMillis checks that num is d in milliseconds, exactly.
func dlCheckMillis(t *testing.T, num string, d time.Duration) {
	t.Helper()
	neg := strings.HasPrefix(num, "-")
	whole, frac, _ := strings.Cut(strings.TrimPrefix(num, "-"), ".")
	if len(frac) > 6 || strings.HasSuffix(frac, "0") || (frac == "" && strings.Contains(num, ".")) {
		t.Fatalf("duration_ms %s: want at most 6 fraction digits and no trailing zeros", num)
	}
	w, err1 := strconv.ParseUint(whole, 10, 64)
	f, err2 := strconv.ParseUint(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("duration_ms %s: %v %v", num, err1, err2)
	}
	u := w*1e6 + f
	if neg {
		u = -u
	}
	if time.Duration(u) != d || (neg && d >= 0) {
		t.Fatalf("duration_ms %s: got %d ns, want %d", num, int64(u), d)
	}
}

func FuzzRecordJSON(f *testing.F) {
	f.Add(uint8(0), dlTestTime.UnixNano(), "k1", "sb1", "10.213.0.2:40000", "http", "GET", "example.com", 80,
		"/v1/x", "allow", true, "r1", "rule r1 allows example.com", uint64(3), 200, "", int64(0), int64(0), int64(0), "", "")
	f.Add(uint8(1), int64(0), "k2", "", "[2001:db8::1]:5", "connect", "CONNECT", "2001:db8::2", 443,
		"", "allow", false, "default", "audit: \"block\" let through", uint64(1), 200, "[2001:db8::2]:443",
		int64(1234), int64(987654), int64(12345678), "upstream reset\n", "")
	f.Add(uint8(2), int64(-1), "", "", "", "", "", "", 0, "", "", false, "", "", uint64(math.MaxUint64), 0, "",
		int64(0), int64(0), int64(0), "", "rule gh added")
	f.Add(uint8(3), int64(math.MaxInt64), "\x00\x1f\x7f", "\u2028\u2029", "\xff\xfe", "<>&", "\\\"", "bücher.de", -1,
		"/\xe2\x80/\xed\xa0\x80", "\t\b\f\r", true, "🙂", "\ufffd", uint64(0), -5, "x",
		int64(math.MinInt64), int64(math.MaxInt64), int64(math.MinInt64), "e", "c")
	f.Fuzz(func(t *testing.T, sel uint8, nanos int64, id, sandbox, client, kind, method, host string, port int,
		path, action string, enforced bool, rule, reason string, pv uint64, status int, upstream string,
		bytesOut, bytesIn, duration int64, errMsg, change string) {
		event := []string{EventDecision, EventClose, EventPolicy, "other", EventDropped}[sel%5]
		rec := Record{
			Seq: uint64(nanos) ^ pv, ID: id, Event: event, Time: time.Unix(0, nanos), Sandbox: sandbox,
			Client: client, Kind: kind, Method: method, Host: host, Port: port, Path: path, Action: action,
			Enforced: enforced, Rule: rule, Reason: reason, PolicyVersion: pv, Status: status,
			Upstream: upstream, BytesOut: bytesOut, BytesIn: bytesIn, Duration: time.Duration(duration),
			Error: errMsg, Change: change, Count: pv ^ uint64(bytesIn), Since: time.Unix(0, nanos/3),
		}
		line := rec.AppendJSON(nil)
		if !json.Valid(line) || !utf8.Valid(line) {
			t.Fatalf("not valid JSON in UTF-8: %q", line)
		}
		if bytes.ContainsAny(line, "\r\n") {
			t.Fatalf("not one line: %q", line)
		}
		keys := dlLineKeys(t, line)
		want := dlWantKeys(event, errMsg != "" && event != EventPolicy && event != EventDropped)
		if diff := cmp.Diff(want, keys); diff != "" {
			t.Fatalf("keys (-want +got):\n%s", diff)
		}

		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		strs := map[string]string{
			FieldID: id, FieldEvent: event, FieldSandbox: sandbox, FieldClient: client, FieldKind: kind,
			FieldMethod: method, FieldHost: host, FieldPath: path, FieldAction: action, FieldRule: rule,
			FieldReason: reason, FieldUpstream: upstream, FieldError: errMsg, FieldChange: change,
		}
		nums := map[string]string{
			FieldV: "1", FieldSeq: strconv.FormatUint(rec.Seq, 10), FieldPort: strconv.Itoa(port),
			FieldPolicyVersion: strconv.FormatUint(pv, 10), FieldStatus: strconv.Itoa(status),
			FieldBytesOut: strconv.FormatInt(bytesOut, 10), FieldBytesIn: strconv.FormatInt(bytesIn, 10),
			FieldCount: strconv.FormatUint(rec.Count, 10),
		}
		for _, k := range keys {
			v := m[k]
			switch {
			case k == FieldTime || k == FieldSince:
				want := rec.Time
				if k == FieldSince {
					want = rec.Since
				}
				s, _ := v.(string)
				got, err := time.Parse(time.RFC3339Nano, s)
				if err != nil || !got.Equal(want) || !strings.HasSuffix(s, "Z") {
					t.Fatalf("%s %q: parsed as %v, %v, want %v in UTC", k, s, got, err, want)
				}
			case k == FieldEnforced:
				if v != enforced {
					t.Fatalf("enforced: got %v, want %v", v, enforced)
				}
			case k == FieldDurationMS:
				n, _ := v.(json.Number)
				dlCheckMillis(t, string(n), rec.Duration)
			case nums[k] != "":
				if n, _ := v.(json.Number); string(n) != nums[k] {
					t.Fatalf("%s: got %v, want %s", k, v, nums[k])
				}
			default:
				in, ok := strs[k]
				if !ok {
					t.Fatalf("unexpected key %q", k)
				}
				if got, want := v, dlFixUTF8(in); got != want {
					t.Fatalf("%s: got %q, want %q", k, got, want)
				}
				if got, want := string(appendJSONString(nil, in)), dlStdJSONString(t, in); got != want {
					t.Fatalf("%s %q: got encoding %s, encoding/json gives %s", k, in, got, want)
				}
			}
		}
	})
}

func dlBenchRecord() *Record {
	return &Record{
		ID: "1x2y", Event: EventDecision, Client: "10.213.0.2:51234", Kind: KindHTTP, Method: "GET",
		Host: "registry.npmjs.org", Port: 80, Path: "/left-pad/-/left-pad-1.3.0.tgz", Action: "allow",
		Enforced: true, Rule: "npm", Reason: "rule npm allows registry.npmjs.org", PolicyVersion: 3,
		Status: 200,
	}
}

func BenchmarkRecordAppendJSON(b *testing.B) {
	rec := dlBenchRecord()
	rec.Time = dlTestTime
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = rec.AppendJSON(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}
