package decisionlog

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// stdRecord is Record as encoding/json decodes it, for comparing Decode
// with the standard library.
type stdRecord struct {
	V             int       `json:"v"`
	Seq           uint64    `json:"seq"`
	ID            string    `json:"id"`
	Event         string    `json:"event"`
	Time          time.Time `json:"time"`
	Sandbox       string    `json:"sandbox"`
	Client        string    `json:"client"`
	Kind          string    `json:"kind"`
	Method        string    `json:"method"`
	Host          string    `json:"host"`
	Port          int32     `json:"port"`
	Path          string    `json:"path"`
	Action        string    `json:"action"`
	Enforced      bool      `json:"enforced"`
	Rule          string    `json:"rule"`
	Reason        string    `json:"reason"`
	PolicyVersion uint64    `json:"policy_version"`
	Status        int32     `json:"status"`
	Upstream      string    `json:"upstream"`
	BytesOut      int64     `json:"bytes_out"`
	BytesIn       int64     `json:"bytes_in"`
	Error         string    `json:"error"`
	Change        string    `json:"change"`
	Count         uint64    `json:"count"`
	Since         time.Time `json:"since"`
	Proto         string    `json:"proto"`
	PID           int32     `json:"pid"`
	Comm          string    `json:"comm"`
	Exe           string    `json:"exe"`
	Addrs         string    `json:"addrs"`
	ApprovalID    string    `json:"approval_id"`
	Answer        string    `json:"answer"`
	Scope         string    `json:"scope"`
	By            string    `json:"by"`
}

func (s stdRecord) record() Record {
	return Record{V: s.V, Seq: s.Seq, ID: s.ID, Event: s.Event, Time: s.Time, Sandbox: s.Sandbox,
		Client: s.Client, Kind: s.Kind, Method: s.Method, Host: s.Host, Port: int(s.Port), Path: s.Path,
		Action: s.Action, Enforced: s.Enforced, Rule: s.Rule, Reason: s.Reason, PolicyVersion: s.PolicyVersion,
		Status: int(s.Status), Upstream: s.Upstream, BytesOut: s.BytesOut, BytesIn: s.BytesIn, Error: s.Error,
		Change: s.Change, Count: s.Count, Since: s.Since, Proto: s.Proto, PID: int(s.PID), Comm: s.Comm, Exe: s.Exe, Addrs: s.Addrs,
		ApprovalID: s.ApprovalID, Answer: s.Answer, Scope: s.Scope, By: s.By}
}

// decodeRecords are records of every event, kind and field, as the
// gateway writes them.
func decodeRecords() []Record {
	t := time.Date(2026, 11, 25, 10, 0, 0, 123456789, time.UTC)
	return []Record{
		{V: 1, Seq: 1, Event: EventPolicy, Time: t, PolicyVersion: 3, Change: "rule gh added"},
		{V: 1, Seq: 2, Event: EventDropped, Time: t, Since: t.Add(-time.Second), Count: 17, Reason: "over 1000 records a second"},
		{V: 1, Seq: 3, ID: "c1", Event: EventDecision, Time: t, Sandbox: "1a2b3c4d", Client: "10.213.0.2:40000",
			Kind: KindHTTP, Method: "GET", Host: "registry.npmjs.org", Port: 80, Path: "/left-pad/é\u2028\"q\\",
			Action: "allow", Enforced: true, Rule: "npm", Reason: "rule npm allows it", PolicyVersion: 3,
			PID: 42, Comm: "node", Exe: "/usr/bin/node"},
		{V: 1, Seq: 4, ID: "c1", Event: EventClose, Time: t, Client: "10.213.0.2:40000", Kind: KindConnect,
			Method: "CONNECT", Host: "api.github.com", Port: 443, Action: "allow", Enforced: true, Rule: "gh",
			Status: 200, Upstream: "140.82.112.6:443", BytesOut: 1 << 40, BytesIn: 12, Duration: 12345678 * time.Nanosecond,
			Error: "upstream closed\n"},
		{V: 1, Seq: 5, ID: "c2", Event: EventDecision, Time: t, Kind: KindBypass, Host: "10.0.0.9", Port: 9999,
			Action: "block", Rule: "guard", Proto: "udp", Count: 99650},
		{V: 1, Seq: 6, ID: "c3", Event: EventDecision, Time: t, Kind: KindDNS, Method: "A", Host: "x.example", Port: 53,
			Action: "block", Rule: "default", Status: 3},
		{V: 1, Seq: 7, ID: "c4", Event: EventDecision, Time: t, Kind: KindConnect, Method: "CONNECT", Host: "registry.npmjs.org",
			Port: 443, Action: "block", Enforced: true, Rule: "guard", Reason: ReasonGuard + "192.0.2.1 is documentation (TEST-NET-1)",
			Status: 403, Addrs: "192.0.2.1,192.0.2.2"},
		{V: 1, Seq: 8, ID: "c5", Event: EventApproval, Time: t, Client: "10.213.0.2:40002", Kind: KindConnect, Method: "CONNECT",
			Host: "pypi.org", Port: 443, Action: "ask", Rule: "default", Reason: "no rule matched; the default is ask",
			PolicyVersion: 3, ApprovalID: "a1", PID: 7, Comm: "pip"},
		{V: 1, Seq: 9, ID: "c5", Event: EventApproval, Time: t, Kind: KindConnect, Method: "CONNECT", Host: "pypi.org", Port: 443,
			Action: "allow", Enforced: true, Rule: "default", Reason: "allowed for this session by cli", PolicyVersion: 4,
			ApprovalID: "a1", Answer: "allow", Scope: "session", By: "cli"},
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	var d Decoder
	for _, want := range decodeRecords() {
		line := want.AppendJSON(nil)
		var got Record
		if err := d.Decode(line, &got); err != nil {
			t.Fatalf("Decode(%s): %v", line, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Decode(AppendJSON(r)) differs from r (-want +got):\n%s", diff)
		}
	}
}

func TestDecodeAcceptsOtherJSON(t *testing.T) {
	line := ` { "unknown": {"a": [1, {"b": null}], "c": "}"}, "host" : "a\u00e9\ud83d\ude00.example", "port": 443,
		"time": null, "enforced": false, "v": 1, "kind": "http", "host": "last.example", "duration_ms": 1.5e3 } ` + "\n"
	var got Record
	if err := Decode([]byte(line), &got); err != nil {
		t.Fatal(err)
	}
	want := Record{V: 1, Host: "last.example", Port: 443, Kind: KindHTTP, Duration: 1500 * time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestDecodeNullKeepsField: null leaves a field as it is, as
// encoding/json does, also after the same key with a value.
func TestDecodeNullKeepsField(t *testing.T) {
	line := `{"v":1,"host":"a.example","host":null,"port":443,"port":null,"enforced":true,"enforced":null,` +
		`"time":"2026-11-25T10:00:00Z","time":null,"bytes_out":5,"bytes_out":null,"duration_ms":2,"duration_ms":null,"kind":null}`
	var got Record
	if err := Decode([]byte(line), &got); err != nil {
		t.Fatal(err)
	}
	want := Record{V: 1, Host: "a.example", Port: 443, Enforced: true, Time: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC),
		BytesOut: 5, Duration: 2 * time.Millisecond}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	var std stdRecord
	if err := json.Unmarshal([]byte(line), &std); err != nil || std.Host != "a.example" || std.Port != 443 || !std.Enforced {
		t.Errorf("encoding/json: got %+v, %v; want host, port and enforced kept", std, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tt := range []struct{ line, want string }{
		{`[]`, "one JSON object"},
		{`{"v":1,"port":"443"}`, "port: want a number"},
		{`{"v":1,"port":4294967296}`, "port: 4294967296 is not an integer in range"},
		{`{"v":1,"port":1.5}`, "port: 1.5 is not an integer"},
		{`{"v":1,"time":"yesterday"}`, `time: "yesterday" is not an RFC 3339 time`},
		{`{"v":1,"enforced":"yes"}`, "enforced: want true or false"},
		{`{"v":1,"host":"a"`, "expected ',' or '}'"},
		{`{"v":1} {"v":1}`, "more after"},
		{`{"v":1,"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, "nested too deeply"},
		{`{"v":2}`, "read it with a newer sbx"},
	} {
		var r Record
		err := Decode([]byte(tt.line), &r)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Decode(%.40s): got error %v, want one containing %q", tt.line, err, tt.want)
		}
	}
	var r Record
	if err := Decode([]byte(`{"v":2}`), &r); !errors.Is(err, ErrNewerVersion) {
		t.Errorf("v 2: got %v, want ErrNewerVersion", err)
	}
}

func TestReader(t *testing.T) {
	recs := decodeRecords()
	var b strings.Builder
	for i, r := range recs {
		b.Write(r.AppendJSON(nil))
		if i < len(recs)-1 {
			b.WriteString("\n\n") // empty lines are skipped; the last has no newline
		}
	}
	long := `{"v":1,"path":"` + strings.Repeat("a", 300<<10) + `"}`
	rd := NewReader(strings.NewReader(b.String()+"\n"+long+"\nnot json\n"), "test.jsonl")
	var got []Record
	var r Record
	var err error
	for err = rd.Next(&r); err == nil; err = rd.Next(&r) {
		got = append(got, r)
	}
	var le *LineError
	if !errors.As(err, &le) || le.Line != 2*len(recs)+1 || le.Name != "test.jsonl" {
		t.Fatalf("after the records: got %v, want a LineError at test.jsonl:%d", err, 2*len(recs)+1)
	}
	if len(got) != len(recs)+1 || len(got[len(recs)].Path) != 300<<10 {
		t.Fatalf("got %d records, want %d and the long one", len(got), len(recs)+1)
	}
	if diff := cmp.Diff(recs, got[:len(recs)]); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := rd.Next(&r); err != le {
		t.Errorf("Next after an error: got %v, want the same error", err)
	}

	rd = NewReader(strings.NewReader(`{"v":1,"path":"`+strings.Repeat("a", MaxLineBytes)+`"}`), "big")
	if err := rd.Next(&r); !errors.As(err, &le) || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("an over-long line: got %v, want a LineError", err)
	}
	rd = NewReader(strings.NewReader(""), "empty")
	if err := rd.Next(&r); err != io.EOF {
		t.Errorf("an empty log: got %v, want io.EOF", err)
	}
}

// FuzzDecode checks Decode against encoding/json: on every line both
// accept they agree, and what AppendJSON writes of the result decodes to
// the same record.
func FuzzDecode(f *testing.F) {
	for _, r := range decodeRecords() {
		f.Add(string(r.AppendJSON(nil)))
	}
	f.Add(`{"host":"\ud800\u0041","path":"\xff","v":null}`)
	f.Add(`{"Host":"a","host":"b"}`)
	f.Add(`{"host":"a","host":null,"port":443,"port":null,"time":"2026-11-25T10:00:00Z","time":null,"enforced":true,"enforced":null}`)
	f.Fuzz(func(t *testing.T, line string) {
		var got Record
		err := Decode([]byte(line), &got)
		var keys map[string]json.RawMessage
		if json.Unmarshal([]byte(line), &keys) != nil || keys == nil {
			// encoding/json refuses it, or takes null as nothing to
			// decode, which is not a record either.
			if err == nil && strings.TrimSpace(line) != "" {
				t.Fatalf("Decode accepted %q, which is not a JSON object", line)
			}
			return
		}
		for k := range keys {
			// encoding/json matches keys without regard to case; Decode
			// matches them exactly, as the log writes them.
			if k != strings.ToLower(k) || strings.ContainsFunc(k, func(r rune) bool { return r > 0x7f }) {
				return
			}
		}
		var std stdRecord
		stdErr := json.Unmarshal([]byte(line), &std)
		if err != nil {
			if stdErr == nil && !errors.Is(err, ErrNewerVersion) && !strings.Contains(err.Error(), "duration_ms") {
				t.Fatalf("Decode(%q): %v, but encoding/json accepts it", line, err)
			}
			return
		}
		if stdErr != nil {
			return // encoding/json is stricter about a field's type (duration_ms aside)
		}
		want := std.record()
		want.Duration = got.Duration // stdRecord has no duration
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("Decode(%q) differs from encoding/json (-std +Decode):\n%s", line, diff)
		}
		var again Record
		if err := Decode(got.AppendJSON(nil), &again); err != nil {
			t.Fatalf("Decode(AppendJSON(%+v)): %v", got, err)
		}
	})
}

// TestReaderTruncatedTail: a last line without a newline that is not a
// record is told apart from a bad line elsewhere.
func TestReaderTruncatedTail(t *testing.T) {
	good := string(decodeRecords()[0].AppendJSON(nil))
	for _, tt := range []struct {
		name          string
		log           string
		wantRecords   int
		wantLine      int
		wantTruncated bool
	}{
		{"cut short", good + "\n" + good + "\n" + `{"v":1,"event":"deci`, 2, 3, true},
		{"bad in the middle", good + "\n" + `{"v":1,"event":"deci` + "\n" + good, 1, 2, false},
		{"bad last line with a newline", good + "\n" + "not json\n", 1, 2, false},
		{"newer version, cut short", good + "\n" + `{"v":2}`, 1, 2, false},
		{"whole last line without a newline", good + "\n" + good, 2, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rd := NewReader(strings.NewReader(tt.log), "test.jsonl")
			var r Record
			n := 0
			var err error
			for err = rd.Next(&r); err == nil; err = rd.Next(&r) {
				n++
			}
			var le *LineError
			if tt.wantLine == 0 {
				if n != tt.wantRecords || err != io.EOF {
					t.Errorf("got %d records and %v, want %d and io.EOF", n, err, tt.wantRecords)
				}
				return
			}
			if n != tt.wantRecords || !errors.As(err, &le) || le.Line != tt.wantLine || errors.Is(err, ErrTruncated) != tt.wantTruncated {
				t.Errorf("got %d records and %v, want %d and a LineError at line %d, truncated %v", n, err, tt.wantRecords, tt.wantLine, tt.wantTruncated)
			}
		})
	}
}
