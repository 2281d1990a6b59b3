package mockllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestNormalizeUser(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"list the files", "list the files"},
		{"  list\n\tthe   files \n", "list the files"},
		// System reminders, whole, however long.
		{"<system-reminder>\nToday's date is 2025-10-07.\n</system-reminder>\nfix the bug", "<system-reminder/> fix the bug"},
		{"<system-reminder>a</system-reminder>x<system-reminder>b</system-reminder>", "<system-reminder/>x<system-reminder/>"},
		{"<system-reminder> never closed 2025-10-07", "<system-reminder> never closed <date>"},
		{"<session_context>\nThis is the Gemini CLI.\nToday's date is Wednesday, December 2, 2026.\n</session_context>\nwrite sbx-mock.txt", "<session_context/> write sbx-mock.txt"},
		// Dates.
		{"Today's date is 2025-10-07.", "Today's date is <date>."},
		{"Today's date is 10/7/2025.", "Today's date is <date>."},
		{"on 2025/10/07 and 07.10.2025", "on <date> and <date>"},
		{"Tuesday, October 7, 2025", "<date>"},
		{"Wed, 8 Oct 2025", "<date>"},
		{"due Oct 7th", "due <date>"},
		{"the 7th of October", "the <date>"},
		{"2025-10-07 (Tuesday) then", "<date> then"},
		{"<current_date>2025-10-07</current_date>", "<current_date><date></current_date>"},
		// Timestamps and times.
		{"at 2025-10-07T14:05:09.123Z ok", "at <timestamp> ok"},
		{"at 2025-10-07 14:05:09+02:00", "at <timestamp>"},
		{"it is 14:05 now", "it is <time> now"},
		{"it is 2:05 PM PDT", "it is <time>"},
		{"at 09:59:59.5 UTC.", "at <time>."},
		{"127.0.0.1:8080", "127.0.0.1:8080"},
		// UUIDs and hex ids.
		{"session 3F2504E0-4F89-11D3-9A0C-0305E82C3301 started", "session <uuid> started"},
		{"commit 1a2b3c4 and 0123456789abcdef0123456789abcdef01234567", "commit <hex> and <hex>"},
		{"at 1759845909 seconds", "at <hex> seconds"},
		{"short ab12 and 123456 stay", "short ab12 and 123456 stay"},
		{"a defaced facade", "a defaced facade"},
		// Temporary paths.
		{"cwd: /tmp/claude-3f2504e0/work/main.go here", "cwd: <tmp> here"},
		{"in '/private/var/folders/xy/T/tmp.ABC' and /var/tmp/x", "in '<tmp>' and <tmp>"},
		{"(/tmp/a) \"/tmp/b\"", "(<tmp>) \"<tmp>\""},
		{"/home/me/tmp/x stays", "/home/me/tmp/x stays"},
		{"/tmp/a:/tmp/b", "<tmp>"},
		{"<cwd>/tmp/a</cwd>", "<cwd><tmp></cwd>"},
		// A word before a temporary path makes the path part of a longer
		// one: both stay, so that normalizing twice changes nothing.
		{"logs/2025-10-07/tmp/y", "logs/2025-10-07/tmp/y"},
		{"<timestamp> Wed/var/folders/0", "<timestamp> Wed/var/folders/0"},
		// Words that look like volatile content but are not.
		{"you may 3 times", "you may 3 times"},
		{"we sat 2025-10-07", "we sat <date>"},
		{"version 1.2.3", "version 1.2.3"},
	}
	for _, tt := range tests {
		got := NormalizeUser(tt.in)
		if got != tt.want {
			t.Errorf("NormalizeUser(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := NormalizeUser(got); again != got {
			t.Errorf("NormalizeUser(%q) = %q, want it unchanged (normalizing twice changes nothing)", got, again)
		}
	}
}

// TestUserStart: the start of a message a recorded turn keeps is
// unchanged by normalizing it again, so that the Responder, which
// normalizes Match.User, matches the message it was cut from.
func TestUserStart(t *testing.T) {
	long := strings.Repeat("word ", 39) // 195 characters
	tests := []struct {
		in, want string
	}{
		{"short", "short"},
		{long + "abcdefgh", strings.TrimSpace(long)},
		// Cut after a word, "Oct 12" of "Oct 12345" would be a date.
		{strings.Repeat("x", 195) + " Oct 12345", strings.Repeat("x", 195) + " Oct"},
		{strings.Repeat("ü", 300), strings.Repeat("ü", maxMatchUser)},
	}
	for _, tt := range tests {
		in := NormalizeUser(tt.in)
		got := userStart(in)
		if got != tt.want {
			t.Errorf("userStart(%q) = %q, want %q", in, got, tt.want)
		}
		if NormalizeUser(got) != got || !strings.Contains(in, got) {
			t.Errorf("userStart(%q) = %q: want a start of it that normalizing leaves as it is", in, got)
		}
	}
}

// TestMatchNormalize: a turn matches the normalized message only when it
// asks to; without normalize the match is exact as ever.
func TestMatchNormalize(t *testing.T) {
	tests := []struct {
		name  string
		match Match
		user  string
		want  bool
	}{
		{"exact", Match{User: "date is 2025-10-07"}, "date is 2025-10-08", false},
		{"exact same", Match{User: "date is 2025-10-07"}, "date is 2025-10-07", true},
		{"normalized", Match{User: "date is 2025-10-07", Normalize: true}, "the date is 2025-10-08.", true},
		{"normalized placeholder", Match{User: "date is <date>", Normalize: true}, "date is 2025-10-08", true},
		{"normalized other text", Match{User: "date is 2025-10-07", Normalize: true}, "time is 2025-10-08", false},
		{"regexp exact", Match{UserRegexp: `^date is <date>$`}, "date is 2025-10-08", false},
		{"regexp normalized", Match{UserRegexp: `^date is <date>$`, Normalize: true}, "date is 2025-10-08", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(&Script{Turns: []Turn{{Match: &tt.match, Reply: &Reply{Text: "ok"}}}})
			w := httptest.NewRecorder()
			r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(userBody(Anthropic, "m", tt.user, false))))
			if got := w.Code == http.StatusOK; got != tt.want {
				t.Errorf("match %+v, user %q: got status %d, want matched %t\n%s", tt.match, tt.user, w.Code, tt.want, w.Body)
			}
		})
	}
}

func TestNormalizeNeedsUser(t *testing.T) {
	_, err := ParseScript("s.yaml", []byte("turns:\n  - match: {model: m, normalize: true}\n    reply: {text: hi}\n"))
	if err == nil || !strings.Contains(err.Error(), "s.yaml:2:") || !strings.Contains(err.Error(), "nothing to normalize") {
		t.Errorf("got %v, want s.yaml:2: ... nothing to normalize", err)
	}
	s, err := ParseScript("s.yaml", []byte("turns:\n  - match: {user: hi, normalize: true}\n    reply: {text: hi}\n"))
	if err != nil || !s.Turns[0].Match.Normalize {
		t.Errorf("got %+v, %v; want a turn with normalize", s, err)
	}
}

// session is an agent's conversation as Claude Code and Codex send it:
// each request repeats the first user message, whose first text is a
// system reminder with the date, the working directory (a temporary
// directory) and the session's id, then the task; then the tool calls and
// their results so far.
type session struct {
	date, time, dir, uuid string
}

func (s session) prompt() string {
	return fmt.Sprintf("<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# currentDate\nToday's date is %s.\n</system-reminder>\n"+
		"Session %s started at %s in %s (today, %s). Fix the failing test in %s/pkg and run go test.",
		s.date, s.uuid, s.time, s.dir, s.date, s.dir)
}

// request returns the body of the request after the answers to calls
// tool calls, in dialect d.
func (s session) request(d Dialect, calls int) string {
	prompt := s.prompt()
	var msgs []any
	switch d {
	case Anthropic:
		msgs = append(msgs, map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": prompt[:strings.Index(prompt, "Session")]},
			map[string]any{"type": "text", "text": prompt[strings.Index(prompt, "Session"):]},
		}})
		for i := range calls {
			id := fmt.Sprintf("toolu_%d", i)
			msgs = append(msgs,
				map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id, "name": "Bash", "input": map[string]any{"command": "ls " + s.dir}}}},
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": s.dir + "/pkg"}}})
		}
		return string(marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 1000, "stream": true, "messages": msgs}))
	case ChatCompletions:
		msgs = append(msgs, map[string]any{"role": "system", "content": "be brief"}, map[string]any{"role": "user", "content": prompt})
		for i := range calls {
			id := fmt.Sprintf("call_%d", i)
			msgs = append(msgs,
				map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": id, "type": "function", "function": map[string]any{"name": "shell", "arguments": `{}`}}}},
				map[string]any{"role": "tool", "tool_call_id": id, "content": s.dir})
		}
		return string(marshal(map[string]any{"model": "gpt-5", "stream": true, "messages": msgs}))
	case Gemini:
		msgs = append(msgs, map[string]any{"role": "user", "parts": []any{map[string]any{"text": prompt}}})
		for range calls {
			msgs = append(msgs,
				map[string]any{"role": "model", "parts": []any{map[string]any{"functionCall": map[string]any{"name": "run_shell_command", "args": map[string]any{"command": "ls"}}}}},
				map[string]any{"role": "user", "parts": []any{map[string]any{"functionResponse": map[string]any{"name": "run_shell_command", "response": map[string]any{"output": s.dir}}}}})
		}
		return string(marshal(map[string]any{"contents": msgs}))
	}
	msgs = append(msgs, map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": prompt}}})
	for i := range calls {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			map[string]any{"type": "function_call", "call_id": id, "name": "shell", "arguments": `{}`},
			map[string]any{"type": "function_call_output", "call_id": id, "output": s.dir})
	}
	return string(marshal(map[string]any{"model": "gpt-5-codex", "stream": true, "input": msgs}))
}

// TestRecordReplayNextDay is issue 25's acceptance: a session recorded
// one day replays the next, its date a day on, its time, session id and
// temporary directory changed: every request takes its recorded turn and
// gets the recorded bytes.
func TestRecordReplayNextDay(t *testing.T) {
	recorded := session{date: "2025-10-07", time: "23:59:58", dir: "/tmp/claude-a1b2c3/work", uuid: "3f2504e0-4f89-41d3-9a0c-0305e82c3301"}
	nextDay := session{date: "2025-10-08", time: "00:00:03", dir: "/tmp/claude-d4e5f6/work", uuid: "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"}
	// Three turns: two tool calls, then the answer.
	upstreamScript := []Turn{
		{Reply: &Reply{Text: "Let me look.", ToolCalls: []ToolCall{{Name: "Bash", Input: json.RawMessage(`{"command":"ls"}`)}}}},
		{Match: &Match{ToolResult: "Bash"}, Reply: &Reply{ToolCalls: []ToolCall{{Name: "Bash", Input: json.RawMessage(`{"command":"go test ./pkg"}`)}}}},
		{Reply: &Reply{Text: "Fixed: the test passes."}},
	}
	for _, d := range dialects {
		t.Run(string(d), func(t *testing.T) {
			upstream := httptest.NewServer(New(&Script{Turns: upstreamScript}))
			defer upstream.Close()
			rec := NewRecorder(nil)
			client := &http.Client{Transport: rec}
			var answers [][]byte
			for calls := range len(upstreamScript) {
				answers = append(answers, fetch(t, client, upstream.URL+pathOf(d, "gemini-2.5-pro", true), recorded.request(d, calls)))
			}
			turns := rec.Turns()
			if len(turns) != len(upstreamScript) {
				t.Fatalf("got %d turns recorded, want %d", len(turns), len(upstreamScript))
			}

			r, srv := replay(t, turns)
			for calls := range len(upstreamScript) {
				got := fetch(t, srv.Client(), srv.URL+pathOf(d, "gemini-2.5-pro", true), nextDay.request(d, calls))
				if !bytes.Equal(got, answers[calls]) {
					t.Errorf("request %d of the next day: got\n%s\nwant the recorded answer\n%s", calls+1, got, answers[calls])
				}
			}
			for _, j := range r.Requests() {
				if j.Unmatched || j.Turn != j.Seq {
					t.Errorf("request %d: %s; want turn %d", j.Seq, j.Outcome, j.Seq)
				}
			}
		})
	}
}

// FuzzNormalizeUser: normalizing never panics, and a normalized text
// stays as it is.
func FuzzNormalizeUser(f *testing.F) {
	f.Add("<system-reminder>Today's date is 2025-10-07.</system-reminder> fix /tmp/x at 10:00 PM, Tuesday, Oct 7th 2025 (Tuesday) 1a2b3c4d 3f2504e0-4f89-41d3-9a0c-0305e82c3301")
	f.Add("Tue <date> <timestamp>, Wed /private/var/folders/x /var/tmp/y 7.10.2025 2025-10-07T10:00:00.123+02:00")
	f.Fuzz(func(t *testing.T, s string) {
		n := NormalizeUser(s)
		if again := NormalizeUser(n); again != n {
			t.Errorf("NormalizeUser(%q) = %q, and normalized again %q; want it unchanged", s, n, again)
		}
	})
}

// BenchmarkNormalizeUser: a message of agent's instructions with a date,
// a time, a path and an id on every line, and the same in a system
// reminder, which normalizing drops whole.
func BenchmarkNormalizeUser(b *testing.B) {
	lines := strings.Repeat("- Run go test ./... before a commit, at 10:00 on 2025-10-07; see /tmp/x and commit 1a2b3c4d.\n", 300)
	for _, tt := range []struct{ name, s string }{
		{"dense", lines},
		{"reminder", "<system-reminder>\n" + lines + "</system-reminder>\nFix the failing test and run go test."},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(tt.s)))
			for b.Loop() {
				NormalizeUser(tt.s)
			}
		})
	}
}
