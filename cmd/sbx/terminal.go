package main

// What sbx writes to a terminal before its own lines and questions
// (docs/cli.md, "What sbx's lines on the terminal promise"): the
// command's output reaches the same terminal, and may leave it in a state
// that hides or garbles what sbx writes next (concealed or same-colored
// text, a scroll region that keeps sbx's lines off the screen, a hidden
// cursor, a character set that draws letters as lines, the alternate
// screen). sbx restores what the command can change before it writes,
// and writes these sequences to a terminal only, never to a pipe or a
// file.

// termReset restores the state sbx's text needs, whatever the command
// left; each part is harmless on a terminal already in that state:
//   - ST (ESC \) and CAN end an escape sequence or a control string (OSC,
//     DCS) the command left unfinished, which would swallow sbx's text;
//   - ESC 7, CSI r, ESC 8 reset the scroll region to the whole screen
//     (DECSTBM) and put the cursor back where it was (CSI r homes it);
//   - CSI 0 m resets the character attributes (conceal, colors, reverse),
//     after ESC 8, which restores those ESC 7 saved;
//   - ESC ( B and SI make G0 ASCII and shift it in (ESC ( 0, or SO with
//     ESC ) 0, draws letters as line-drawing glyphs);
//   - CSI ? 25 h shows the cursor, CSI ? 7 h turns line wrap on (off, the
//     rest of a long line overwrites its last column), CSI 4 l turns
//     insert mode off.
const termReset = "\x1b\\\x18" + "\x1b7\x1b[r\x1b8" + "\x1b[0m" + "\x1b(B\x0f" + "\x1b[?25h\x1b[?7h\x1b[4l"

// termLeaveAlt leaves the alternate screen for the main one. It is
// written only when the command's output entered it: sbx started on the
// main screen then, and leaving a screen sbx did not see entered would
// move the cursor (xterm restores the one saved on entry).
const termLeaveAlt = "\x1b[?1049l"

// termResetColors sets the palette and the default foreground,
// background and cursor colors back to the terminal's own (OSC 104, 110,
// 111, 112), when the command set any (same default foreground and
// background hide every line). It is written only then, so that colors
// the user set before sbx ran stay.
const termResetColors = "\x1b]104\x1b\\\x1b]110\x1b\\\x1b]111\x1b\\\x1b]112\x1b\\"

// termState follows the command's output on its way to the terminal, as
// a terminal parses it (the states of a VT500 parser, bounded), to know
// what it changed that only a conditional reset restores: whether it is
// on the alternate screen, and whether it set colors. It also notes any
// output that is not plain text (dirty). The zero value is a terminal
// on the main screen, in its own colors.
type termState struct {
	state  byte   // parser state: ground, esc, csi, osc, str
	buf    []byte // the parameters of the CSI or the start of the OSC being parsed
	strEsc bool   // in osc or str, the last byte was ESC (ST is ESC \)

	alt    bool // the command's output entered the alternate screen
	colors bool // the command's output set a color (OSC 4, 5, 10 to 19)
	dirty  bool // the command wrote a control, escape or non-ASCII byte
}

// Parser states.
const (
	stGround = iota
	stEsc
	stCSI
	stOSC
	stStr // DCS, SOS, PM, APC: ignored up to ST
)

// maxTermParam bounds the bytes of a sequence's parameters termState
// keeps: a longer one is not one it acts on.
const maxTermParam = 64

// feed follows p, written to the terminal.
func (t *termState) feed(p []byte) {
	for _, c := range p {
		if c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\b' || c >= 0x7f {
			t.dirty = true
		}
		t.byte(c)
	}
}

// byte follows one byte. C1 controls are taken in their 8-bit form too:
// some terminals act on them.
func (t *termState) byte(c byte) {
	switch c {
	case 0x18, 0x1a: // CAN, SUB: abort any sequence
		t.state = stGround
		return
	case 0x1b:
		if t.state == stOSC || t.state == stStr {
			t.strEsc = true
			return
		}
		t.state = stEsc
		return
	case 0x9b:
		t.begin(stCSI)
		return
	case 0x9d:
		t.begin(stOSC)
		return
	case 0x90, 0x98, 0x9e, 0x9f:
		t.begin(stStr)
		return
	}
	switch t.state {
	case stEsc:
		switch c {
		case '[':
			t.begin(stCSI)
		case ']':
			t.begin(stOSC)
		case 'P', 'X', '^', '_':
			t.begin(stStr)
		default:
			if c >= 0x30 { // a final byte; intermediates (0x20 to 0x2f) keep the sequence going
				t.state = stGround
			}
		}
	case stCSI:
		switch {
		case c >= 0x40 && c <= 0x7e:
			t.csi(c)
			t.state = stGround
		case len(t.buf) < maxTermParam:
			t.buf = append(t.buf, c)
		}
	case stOSC, stStr:
		end := c == 0x07 && t.state == stOSC || c == 0x9c || t.strEsc && c == '\\'
		if t.strEsc && c != '\\' {
			// ESC and another byte: the string ended, a sequence begins.
			t.strEsc = false
			if t.state == stOSC {
				t.osc()
			}
			t.state = stEsc
			t.byte(c)
			return
		}
		if end {
			if t.state == stOSC {
				t.osc()
			}
			t.state, t.strEsc = stGround, false
			return
		}
		if t.state == stOSC && len(t.buf) < maxTermParam {
			t.buf = append(t.buf, c)
		}
	}
}

func (t *termState) begin(state byte) {
	t.state, t.buf, t.strEsc = state, t.buf[:0], false
}

// csi acts on a control sequence ended by final: CSI ? Pm h or l sets or
// resets private modes, 47, 1047 and 1049 among them (the alternate
// screen).
func (t *termState) csi(final byte) {
	if (final != 'h' && final != 'l') || len(t.buf) == 0 || t.buf[0] != '?' {
		return
	}
	n, valid := 0, true
	for _, c := range append(t.buf[1:], ';') {
		switch {
		case c >= '0' && c <= '9' && n < 1e6:
			n = n*10 + int(c-'0')
		case c == ';' || c == ':':
			if valid && (n == 47 || n == 1047 || n == 1049) {
				t.alt = final == 'h'
			}
			n, valid = 0, true
		default:
			valid = false
		}
	}
}

// osc acts on an operating system command: OSC 4 and 5 set palette
// colors, OSC 10 to 19 the default and special ones.
func (t *termState) osc() {
	n, i := 0, 0
	for ; i < len(t.buf) && i < 4 && t.buf[i] >= '0' && t.buf[i] <= '9'; i++ {
		n = n*10 + int(t.buf[i]-'0')
	}
	if i > 0 && (n == 4 || n == 5 || n >= 10 && n <= 19) {
		t.colors = true
	}
}

// reset returns what to write to the terminal before sbx's own text:
// termReset when full or when the command's output was not plain text,
// preceded by termLeaveAlt and termResetColors when it changed those; ""
// when nothing is needed. It takes the terminal as restored.
func (t *termState) reset(full bool) string {
	if !full && !t.dirty && !t.alt && !t.colors {
		return ""
	}
	s := termReset
	if t.alt {
		// Leaving first: the scroll region and cursor are reset on the
		// main screen then.
		s = "\x1b\\\x18" + termLeaveAlt + s
	}
	if t.colors {
		s += termResetColors
	}
	// The parser is back in the ground state: the sequence ended any.
	*t = termState{buf: t.buf[:0]}
	return s
}
