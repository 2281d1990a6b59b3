package mockllm

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWarnings: a turn after a turn of times: unlimited that fits every
// request it fits can never answer; one that fits requests the earlier
// turn does not, or comes after a limited turn, can.
func TestWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		want         []string
	}{
		{"after an unlimited catch-all", `turns:
  - reply: {text: a}
    times: unlimited
  - match: {user: hi}
    reply: {text: b}
  - fault: {status: 500}
`, []string{
			"s.yaml:4: turn 2: can never answer: turn 1 (s.yaml:2) answers every request it fits (times: unlimited) and has no match; move this turn before it, or narrow its match",
			"s.yaml:6: turn 3: can never answer: turn 1 (s.yaml:2) answers every request it fits (times: unlimited) and has no match; move this turn before it, or narrow its match",
		}},
		{"after an unlimited turn whose match covers it", `turns:
  - match: {model: m, user: list}
    reply: {text: a}
    times: unlimited
  - match: {model: m, user: "list the files", tool_result: bash}
    reply: {text: b}
`, []string{
			"s.yaml:5: turn 2: can never answer: turn 1 (s.yaml:2) answers every request it fits (times: unlimited) and matches every request this one matches; move this turn before it, or narrow its match",
		}},
		{"an unlimited catch-all last", `turns:
  - match: {user: hi}
    reply: {text: b}
  - reply: {text: a}
    times: unlimited
`, nil},
		{"after a limited catch-all", `turns:
  - reply: {text: a}
    times: 5
  - reply: {text: b}
`, nil},
		{"after an unlimited turn of another model", `turns:
  - match: {model: a}
    reply: {text: a}
    times: unlimited
  - match: {model: b}
    reply: {text: b}
  - match: {user: hi}
    reply: {text: b}
`, nil},
		{"after an unlimited turn with a regexp", `turns:
  - match: {user_regexp: "^hi"}
    reply: {text: a}
    times: unlimited
  - match: {user: hi}
    reply: {text: b}
`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseScript("s.yaml", []byte(tc.script))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range Warnings(s.Turns) {
				got = append(got, w.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTimesUnlimited: a turn of times: unlimited answers every request
// it fits, and is written back as it was read.
func TestTimesUnlimited(t *testing.T) {
	const script = "turns:\n  - reply: {text: again}\n    times: unlimited\n"
	s, err := ParseScript("s.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	if s.Turns[0].Times != Unlimited {
		t.Fatalf("got times %d, want Unlimited", s.Turns[0].Times)
	}
	_, srv := serve(t, script)
	for i := range 20 {
		resp, body, err := post(t, srv, "POST", "/v1/messages", userBody(Anthropic, "m", "hi", false))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || !strings.Contains(body, "again") {
			t.Fatalf("request %d: got %d %s, want 200 with the turn's text", i+1, resp.StatusCode, body)
		}
	}
	var b strings.Builder
	if err := WriteScript(&b, s.Turns); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "times: unlimited") {
		t.Errorf("WriteScript wrote %q, want times: unlimited", b.String())
	}
	for _, bad := range []string{"times: forever", "times: -1", "times: 0"} {
		if _, err := ParseScript("s.yaml", []byte("turns:\n  - reply: {text: x}\n    "+bad+"\n")); err == nil || !strings.Contains(err.Error(), "unlimited") {
			t.Errorf("%s: got %v, want an error that offers unlimited", bad, err)
		}
	}
}
