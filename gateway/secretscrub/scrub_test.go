package secretscrub

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	key = "sk-ant-api03-Zq8xVw2LmN4pR6tY0uI9oP3aS5dF7gH1jK"
	ph  = "sbx-secret-ANTHROPIC_API_KEY-0123456789abcdef0123456789abcdef"
	gh  = "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
	ghp = "sbx-secret-GH_TOKEN-fedcba9876543210fedcba9876543210"
)

func testScrubber() *Scrubber {
	return New([]Secret{{Name: "ANTHROPIC_API_KEY", Value: key, Placeholder: ph}, {Name: "GH_TOKEN", Value: gh, Placeholder: ghp}})
}

func TestString(t *testing.T) {
	s := testScrubber()
	for _, tc := range []struct {
		in, want string
		found    []string
	}{
		{"", "", nil},
		{"nothing here", "nothing here", nil},
		{key, ph, []string{"ANTHROPIC_API_KEY"}},
		{"Bearer " + key, "Bearer " + ph, []string{"ANTHROPIC_API_KEY"}},
		{`{"error":{"message":"invalid x-api-key: ` + key + `"}}`, `{"error":{"message":"invalid x-api-key: ` + ph + `"}}`, []string{"ANTHROPIC_API_KEY"}},
		{key + key[:10] + gh + key, ph + key[:10] + ghp + ph, []string{"ANTHROPIC_API_KEY", "GH_TOKEN", "ANTHROPIC_API_KEY"}},
		{strings.ToUpper(key), strings.ToUpper(key), nil}, // matched as sent
	} {
		var found []string
		got := s.String(tc.in, func(n string) { found = append(found, n) })
		if got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if diff := cmp.Diff(tc.found, found); diff != "" {
			t.Errorf("String(%q) found (-want +got):\n%s", tc.in, diff)
		}
	}
	var nilS *Scrubber
	if got := nilS.String(key, nil); got != key {
		t.Errorf("nil Scrubber: got %q, want it unchanged", got)
	}
	if New([]Secret{{Name: "E", Value: "", Placeholder: "x"}}) != nil {
		t.Error("New with only an empty value: got a Scrubber, want nil")
	}
}

// chunked writes in to a Writer in pieces of n bytes and returns what
// came out, and what the Writer held after each write.
func chunked(t *testing.T, s *Scrubber, in string, n int) (string, []int) {
	t.Helper()
	var out bytes.Buffer
	w := s.NewWriter(&out, nil)
	var held []int
	for i := 0; i < len(in); i += n {
		p := []byte(in[i:min(len(in), i+n)])
		if m, err := w.Write(p); m != len(p) || err != nil {
			t.Fatalf("Write: got %d, %v, want %d, nil", m, err, len(p))
		}
		held = append(held, w.Held())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.String(), held
}

func TestWriterSplitValues(t *testing.T) {
	s := testScrubber()
	in := "data: {\"echo\":\"" + key + "\"}\n\ndata: " + gh + gh + "\n\n" + key[:20] + "x" + key[:len(key)-1]
	want := s.String(in, nil)
	if strings.Contains(want, key) || strings.Contains(want, gh) {
		t.Fatalf("String left a value in %q", want)
	}
	for n := 1; n <= len(in); n++ {
		got, held := chunked(t, s, in, n)
		if got != want {
			t.Fatalf("written %d bytes at a time: got %q, want %q", n, got, want)
		}
		for _, h := range held {
			if h >= len(key) {
				t.Fatalf("written %d bytes at a time: held %d bytes, want fewer than the longest value (%d)", n, h, len(key))
			}
		}
	}
}

// TestWriterHoldsOnlyAPrefix: a stream's bytes go out as they come, but
// for those at the end that could start a value.
func TestWriterHoldsOnlyAPrefix(t *testing.T) {
	s := testScrubber()
	for _, tc := range []struct {
		in   string
		held int
	}{
		{"data: hello\n\n", 0},
		{"data: s", 1},
		{"data: sk-ant-", 7},
		{"data: " + key[:len(key)-1], len(key) - 1},
		{"data: " + key, 0},
		{"data: sk-x", 0},
		{"data: gh", 2},
	} {
		var out bytes.Buffer
		w := s.NewWriter(&out, nil)
		w.Write([]byte(tc.in))
		if w.Held() != tc.held || out.Len() != len(s.String(tc.in, nil))-tc.held {
			t.Errorf("Write(%q): got %d held and %q out, want %d held", tc.in, w.Held(), out.String(), tc.held)
		}
	}
}

type failWriter struct{}

var errWrite = errors.New("write failed")

func (failWriter) Write(p []byte) (int, error) { return 0, errWrite }

func TestWriterErrors(t *testing.T) {
	w := testScrubber().NewWriter(failWriter{}, nil)
	if _, err := w.Write([]byte("abc " + key)); !errors.Is(err, errWrite) {
		t.Errorf("Write: got %v, want %v", err, errWrite)
	}
}

// frame is one frame as a server sends it.
func frame(fin bool, op byte, payload []byte, mask bool) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	b := []byte{b0}
	var m byte
	if mask {
		m = 0x80
	}
	switch n := len(payload); {
	case n <= 125:
		b = append(b, m|byte(n))
	case n <= 0xffff:
		b = append(b, m|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if mask {
		k := [4]byte{1, 2, 3, 4}
		b = append(b, k[:]...)
		for i, c := range payload {
			b = append(b, c^k[i&3])
		}
		return b
	}
	return append(b, payload...)
}

// wsMessage is a message read back from frames, or a control frame.
type wsMessage struct {
	Op      byte
	Payload string
}

// readFrames reads a client's view of frames: messages joined from their
// fragments, control frames as they are; it fails on a masked frame or a
// bad fragment sequence.
func readFrames(t *testing.T, b []byte) []wsMessage {
	t.Helper()
	var msgs []wsMessage
	var cur *wsMessage
	r := bytes.NewReader(b)
	for r.Len() > 0 {
		var h [2]byte
		io.ReadFull(r, h[:])
		fin, op, n := h[0]&0x80 != 0, h[0]&0x0f, uint64(h[1]&0x7f)
		if h[1]&0x80 != 0 || h[0]&0x70 != 0 {
			t.Fatalf("a frame to the client is masked or has RSV bits: %#x %#x", h[0], h[1])
		}
		switch n {
		case 126:
			var e [2]byte
			io.ReadFull(r, e[:])
			n = uint64(binary.BigEndian.Uint16(e[:]))
		case 127:
			var e [8]byte
			io.ReadFull(r, e[:])
			n = binary.BigEndian.Uint64(e[:])
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			t.Fatalf("a frame shorter than its length: %v", err)
		}
		switch {
		case op >= 8:
			if len(p) > 125 {
				t.Fatalf("a control frame of %d bytes", len(p))
			}
			msgs = append(msgs, wsMessage{op, string(p)})
			continue
		case op == 0 && cur == nil, op != 0 && cur != nil:
			t.Fatalf("opcode %d out of sequence", op)
		case op != 0:
			cur = &wsMessage{Op: op}
		}
		cur.Payload += string(p)
		if fin {
			msgs = append(msgs, *cur)
			cur = nil
		}
	}
	if cur != nil {
		t.Fatal("the last message has no final fragment")
	}
	return msgs
}

func TestCopyFrames(t *testing.T) {
	s := testScrubber()
	long := strings.Repeat("x", 70000) + key + strings.Repeat("y", 100)
	var in bytes.Buffer
	in.Write(frame(true, 1, []byte(`{"type":"echo","key":"`+key+`"}`), false))
	// A value split across three fragments, a ping inside the message.
	in.Write(frame(false, 1, []byte("a "+key[:5]), false))
	in.Write(frame(false, 0, []byte(key[5:20]), false))
	in.Write(frame(true, 9, []byte(key), false))
	in.Write(frame(true, 0, []byte(key[20:]+" b"), false))
	in.Write(frame(true, 2, []byte(gh), true)) // masked, though a server must not
	in.Write(frame(true, 2, []byte(long), false))
	in.Write(frame(false, 1, nil, false))
	in.Write(frame(true, 0, []byte(key[:3]), false)) // a prefix at the end of a message is not a value
	in.Write(frame(true, 8, append([]byte{3, 232}, "bye "+key...), false))
	var out bytes.Buffer
	var found []string
	n, err := s.CopyFrames(&out, &in, func(name string) { found = append(found, name) })
	if err != nil || n != int64(out.Len()) {
		t.Fatalf("CopyFrames: got %d, %v, want %d, nil", n, err, out.Len())
	}
	if bytes.Contains(out.Bytes(), []byte(key)) || bytes.Contains(out.Bytes(), []byte(gh)) {
		t.Error("a value went through")
	}
	closing := string([]byte{3, 232}) + "bye " + ph
	want := []wsMessage{
		{1, `{"type":"echo","key":"` + ph + `"}`},
		{9, ph},
		{1, "a " + ph + " b"},
		{2, ghp},
		{2, strings.Repeat("x", 70000) + ph + strings.Repeat("y", 100)},
		{1, key[:3]},
		{8, closing[:min(len(closing), 125)]},
	}
	if diff := cmp.Diff(want, readFrames(t, out.Bytes())); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if len(found) != 6 {
		t.Errorf("found %d replacements (%v), want 6", len(found), found)
	}
}

func TestCopyFramesRefuses(t *testing.T) {
	s := testScrubber()
	deflated := frame(true, 1, []byte("compressed"), false)
	deflated[0] |= 0x40 // RSV1: permessage-deflate
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"rsv1", deflated, ErrFrameExtension},
		{"continuation first", frame(true, 0, []byte("x"), false), ErrFrameProtocol},
		{"two starts", append(frame(false, 1, []byte("x"), false), frame(true, 1, []byte("y"), false)...), ErrFrameProtocol},
		{"long ping", frame(true, 9, bytes.Repeat([]byte("p"), 126), false), ErrFrameProtocol},
		{"fragmented ping", frame(false, 9, []byte("p"), false), ErrFrameProtocol},
		{"reserved opcode", frame(true, 3, []byte("x"), false), ErrFrameProtocol},
		{"cut short", frame(true, 1, []byte(key), false)[:20], io.ErrUnexpectedEOF},
	} {
		var out bytes.Buffer
		_, err := s.CopyFrames(&out, bytes.NewReader(tc.in), nil)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
		if bytes.Contains(out.Bytes(), []byte(key)) || tc.name == "rsv1" && out.Len() > 0 {
			t.Errorf("%s: wrote %q", tc.name, out.Bytes())
		}
	}
}

// FuzzWriter: however a stream is cut into writes, what comes out is what
// String makes of the whole, and holds no value.
func FuzzWriter(f *testing.F) {
	f.Add([]byte("hello "+key+" world"), "sk-ant-", "ghp_x", uint8(3))
	f.Add([]byte("aaaaaaaab"), "aaab", "ab", uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, v1, v2 string, cut uint8) {
		if v1 == "" || v2 == "" || strings.Contains(v1, v2) || strings.Contains(v2, v1) ||
			strings.ContainsRune(v1, 0) || strings.ContainsRune(v2, 0) {
			return // a value inside another is replaced, but not always as String would
		}
		s := New([]Secret{{Name: "A", Value: v1, Placeholder: "\x00A\x00"}, {Name: "B", Value: v2, Placeholder: "\x00B\x00"}})
		want := s.String(string(in), nil)
		n := int(cut)%17 + 1
		var out bytes.Buffer
		w := s.NewWriter(&out, nil)
		for i := 0; i < len(in); i += n {
			w.Write(in[i:min(len(in), i+n)])
			if w.Held() >= max(len(v1), len(v2)) {
				t.Fatalf("held %d bytes", w.Held())
			}
		}
		w.Flush()
		if got := out.String(); got != want {
			t.Fatalf("in writes of %d: got %q, want %q", n, got, want)
		}
		bare := strings.NewReplacer("\x00A\x00", "\x00", "\x00B\x00", "\x00").Replace(want)
		if strings.Contains(bare, v1) || strings.Contains(bare, v2) {
			t.Fatalf("a value in %q", want)
		}
	})
}

// BenchmarkWriter writes a 1 MiB body with no value in it, 32 KiB at a
// time, through a Writer, and through io.Copy for comparison (neither
// side's ReadFrom or WriteTo used: each copies through the buffer).
func BenchmarkWriter(b *testing.B) {
	body := bytes.Repeat([]byte(`data: {"type":"content_block_delta","delta":{"text":"sk is short for skip, a key is not here"}}`+"\n\n"), 1<<20/96)
	s := testScrubber()
	b.Run("io.Copy", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		buf := make([]byte, 32<<10)
		for b.Loop() {
			io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{bytes.NewReader(body)}, buf)
		}
	})
	b.Run("scrub", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		buf := make([]byte, 32<<10)
		w := s.NewWriter(io.Discard, nil)
		for b.Loop() {
			io.CopyBuffer(w, struct{ io.Reader }{bytes.NewReader(body)}, buf)
			w.Flush()
		}
	})
}
