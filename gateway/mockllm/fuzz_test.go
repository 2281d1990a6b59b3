package mockllm

import (
	"bytes"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzDecodeTurns: what the management API receives either fails with an
// error or decodes to turns that pass CheckTurns and survive WriteScript.
func FuzzDecodeTurns(f *testing.F) {
	f.Add([]byte(everyField))
	f.Add([]byte(`[{"reply": {"text": "a", "tool_calls": [{"name": "f", "input": {"a": [1, 2.5e3, null]}}]}}]`))
	f.Add([]byte(`{"fault": {"status": 429, "headers": {"retry-after": "1"}, "disconnect_after_events": 0}}`))
	f.Add([]byte("- reply: {raw: {dialect: anthropic, events: [\"data: x\\r\\n\\r\\n\"]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		turns, err := DecodeTurns("f", data)
		if err != nil {
			return
		}
		if err := CheckTurns(turns); err != nil {
			t.Fatalf("decoded turns fail CheckTurns: %v", err)
		}
		var b bytes.Buffer
		if err := WriteScript(&b, turns); err != nil {
			t.Fatalf("WriteScript: %v", err)
		}
		back, err := ParseScript("written", b.Bytes())
		if err != nil {
			t.Fatalf("ParseScript of what WriteScript wrote: %v\n%s", err, b.String())
		}
		if diff := cmp.Diff(turns, back.Turns, cmpopts.IgnoreFields(Turn{}, "Origin"), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("turns written and read back (-want +got):\n%s", diff)
		}
	})
}

// FuzzServe: whatever a sandbox sends, the Responder answers without
// panicking, 200 for what fits and 400 for what does not parse.
func FuzzServe(f *testing.F) {
	for _, d := range dialects {
		f.Add(uint8(0), []byte(userBody(d, "m", "hi", true)))
		f.Add(uint8(1), []byte(userBody(d, "m", "hi", false)))
	}
	f.Add(uint8(0), []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x"}]}]}`))
	f.Add(uint8(2), []byte(`{"input":[{"type":"function_call_output","call_id":"c"},{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}`))
	s, err := ParseScript("s", []byte(`turns:
  - match: {tool_result: bash}
    reply: {text: "tool"}
  - reply:
      text: "Hello ünïcode"
      tool_calls: [{name: bash, input: {command: ls}}]
      chunk_size: 3
`))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		r := New(s)
		d := dialects[int(which)%len(dialects)]
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("POST", pathOf(d, "m", false), bytes.NewReader(body)))
		if w.Code != 200 && w.Code != 400 {
			t.Fatalf("got status %d, want 200 or 400", w.Code)
		}
		if j := r.Requests(); len(j) != 1 || (w.Code == 200) == j[0].Unmatched {
			t.Fatalf("got journal %+v for status %d", j, w.Code)
		}
	})
}
