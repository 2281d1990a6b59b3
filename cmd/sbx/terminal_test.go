package main

import (
	"io"
	"strings"
	"testing"
)

// TestTermState: the follower of the command's output knows when it
// entered or left the alternate screen and set colors, across writes and
// in the forms terminals take (7-bit and 8-bit CSI, OSC ended by BEL or
// ST, several modes in one sequence), and is not fooled by the same
// bytes inside a string or an aborted sequence.
func TestTermState(t *testing.T) {
	for _, tc := range []struct {
		name               string
		writes             []string
		alt, colors, dirty bool
	}{
		{"plain text", []string{"hello\r\n\tworld\b\n"}, false, false, false},
		{"colors are dirty", []string{"\x1b[31mred\x1b[0m\n"}, false, false, true},
		{"1049", []string{"\x1b[?1049h"}, true, false, true},
		{"47", []string{"\x1b[?47h"}, true, false, true},
		{"1047 among others", []string{"\x1b[?25;1047;1h"}, true, false, true},
		{"split", []string{"\x1b", "[?10", "49h"}, true, false, true},
		{"8-bit CSI", []string{"\x9b?1049h"}, true, false, true},
		{"entered and left", []string{"\x1b[?1049h", "text", "\x1b[?1049l"}, false, false, true},
		{"not private", []string{"\x1b[1049h"}, false, false, true},
		{"other mode", []string{"\x1b[?10490h"}, false, false, true},
		{"in an OSC", []string{"\x1b]0;[?1049h\x07"}, false, false, true},
		{"in a DCS", []string{"\x1bP[?1049h\x1b\\"}, false, false, true},
		{"ESC ends an OSC", []string{"\x1b]0;\x1b[?1049h"}, true, false, true}, // as xterm parses it
		{"aborted by CAN", []string{"\x1b[?10\x1849h"}, false, false, true},
		{"OSC 11 BEL", []string{"\x1b]11;#000000\x07"}, false, true, true},
		{"OSC 10 ST", []string{"\x1b]10;rgb:0/0/0\x1b\\"}, false, true, true},
		{"OSC 4 split", []string{"\x1b]", "4;7;#000", "000\x07"}, false, true, true},
		{"OSC 0 title", []string{"\x1b]0;title\x07"}, false, false, true},
		{"OSC 52", []string{"\x1b]52;c;aGk=\x07"}, false, false, true},
		{"unfinished OSC", []string{"\x1b]11;#000000"}, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s termState
			for _, w := range tc.writes {
				s.feed([]byte(w))
			}
			if s.alt != tc.alt || s.colors != tc.colors || s.dirty != tc.dirty {
				t.Errorf("got alt %v, colors %v, dirty %v; want %v, %v, %v", s.alt, s.colors, s.dirty, tc.alt, tc.colors, tc.dirty)
			}
		})
	}
}

// TestTTYGateRestoresTerminal: on a terminal, each of sbx's own lines
// is preceded by the reset when the command's output was not plain text
// (or the gate cannot see all of it), by the alternate screen's leaving
// when the command entered it, by the colors' reset when it set them; a
// command that writes plain text gets sbx's lines as they are.
func TestTTYGateRestoresTerminal(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		blind     bool
		want      string
	}{
		{"plain", "working\n", false, "working\nsbx: allow x\n"},
		{"blind", "working\n", true, "working\n" + termReset + "sbx: allow x\n"},
		{"concealed", "\x1b[8mworking\n", false, "\x1b[8mworking\n" + termReset + "sbx: allow x\n"},
		{"scroll region, line drawing", "\x1b[2;3r\x1b(0q\n", false, "\x1b[2;3r\x1b(0q\n" + termReset + "sbx: allow x\n"},
		{"unfinished line", "\x1b[?25lworking", false, "\x1b[?25lworking" + termReset + "\nsbx: allow x\n"},
		{"alternate screen", "\x1b[?1049hdrawn\n", false, "\x1b[?1049hdrawn\n\x1b\\\x18" + termLeaveAlt + termReset + "sbx: allow x\n"},
		{"colors", "\x1b]11;#ffffff\x07\n", false, "\x1b]11;#ffffff\x07\n" + termReset + termResetColors + "sbx: allow x\n"},
		{"unfinished OSC", "\x1b]0;", false, "\x1b]0;" + termReset + "\nsbx: allow x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s screen
			g := newTTYGate()
			g.term, g.blind = true, tc.blind
			cmdOut, own := g.writer(&s, false), g.writer(&s, true)
			io.WriteString(cmdOut, tc.out)
			io.WriteString(own, "sbx: allow x\n")
			if got := s.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			// Restored: the next line needs nothing, unless blind.
			io.WriteString(own, "sbx: allow y\n")
			if got, want := strings.TrimPrefix(s.String(), tc.want), "sbx: allow y\n"; !tc.blind && got != want {
				t.Errorf("then got %q, want %q", got, want)
			}
		})
	}
}

// TestPromptRestoresTerminal: on a terminal, the question is drawn after
// the reset, whatever the command wrote, and after leaving the alternate
// screen the command entered.
func TestPromptRestoresTerminal(t *testing.T) {
	r := newPromptRig(t, false, true)
	r.p.reset = true
	io.WriteString(r.out, "sbx: ask  fake.test\n\x1b[?1049h\x1b[8m")
	r.ask(t, "a1", "later.test")
	waitFor(t, r.screen, " > ", 1)
	s := r.screen.String()
	i := strings.Index(s, "sbx: ask       GET later.test")
	if i < 0 {
		t.Fatalf("got screen %q, want the question", s)
	}
	if want := "\x1b\\\x18" + termLeaveAlt + termReset + "\n"; !strings.HasSuffix(s[:i], want) {
		t.Errorf("got %q before the question, want it to end with %q", s[:i], want)
	}
	r.tty.type_(t, "n")
	waitFor(t, r.screen, "> denied once by tty\n", 1)
}
