package handoff

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestRead: well-formed headers give their destination; everything else a
// capture shim would never write is refused, the source fields included.
func TestRead(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // the destination; "" for a refusal
	}{
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 443\r\n", "192.0.2.1:443"},
		{"PROXY TCP4 0.0.0.0 192.0.2.1 0 443\r\n", "192.0.2.1:443"},
		{"PROXY TCP6 fd00::2 2001:db8::1 40000 443\r\n", "[2001:db8::1]:443"},
		{"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n", "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"},

		{"", ""},
		{"\r\n", ""},
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 443\n", ""},      // no CR
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 443", ""},        // no line end
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 443\r", ""},      // cut short
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 443 \r\n", ""},   // a seventh field
		{"PROXY TCP4 10.0.0.2  192.0.2.1 40000 443\r\n", ""},   // two spaces
		{"PROXY UNKNOWN\r\n", ""},                              // the shim always knows
		{"proxy TCP4 10.0.0.2 192.0.2.1 40000 443\r\n", ""},    // case
		{"PROXY TCP5 10.0.0.2 192.0.2.1 40000 443\r\n", ""},    // protocol
		{"PROXY TCP4 2001:db8::2 192.0.2.1 40000 443\r\n", ""}, // source of another family
		{"PROXY TCP4 example 192.0.2.1 40000 443\r\n", ""},     // source not an address
		{"PROXY TCP4 10.0.0.2 192.0.2.1 -1 443\r\n", ""},       // source port
		{"PROXY TCP4 10.0.0.2 192.0.2.1 65536 443\r\n", ""},
		{"PROXY TCP4 10.0.0.2 192.0.2.1 040000 443\r\n", ""},
		{"PROXY TCP4 10.0.0.2 2001:db8::1 40000 443\r\n", ""}, // destination of another family
		{"PROXY TCP6 fd00::2 ::ffff:192.0.2.1 40000 443\r\n", ""},
		{"PROXY TCP6 fd00::2 fe80::1%eth0 40000 443\r\n", ""},
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 0\r\n", ""},
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 0443\r\n", ""},
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 +443\r\n", ""},
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 4\r43\r\n", ""},
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 443\x00\r\n", ""},
		{"PROXY TCP4 10.0.0.2 192.0.2.1 40000 443\r\n"[:20] + strings.Repeat("9", 100) + "\r\n", ""},
	} {
		got, err := Read(bufio.NewReader(strings.NewReader(tc.in)))
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("Read(%q) = %v, want an error", tc.in, got)
		case tc.want != "" && (err != nil || got.String() != tc.want):
			t.Errorf("Read(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// TestReadBoundsTheHeader: a line longer than the longest header is
// refused once that many bytes are read, wherever its end is: no more is
// taken from the connection.
func TestReadBoundsTheHeader(t *testing.T) {
	for _, in := range []string{
		"PROXY TCP4 " + strings.Repeat("1", 4096) + "\r\n",
		strings.Repeat("A", 200) + "\r\n",
		"PROXY TCP6 " + strings.Repeat("f", 120) + " 2001:db8::1 1 443\r\n",
	} {
		br := bufio.NewReader(strings.NewReader(in))
		if dst, err := Read(br); err == nil {
			t.Errorf("Read(%.20q...) = %v, want an error", in, dst)
		}
		rest, _ := io.ReadAll(br)
		if consumed := len(in) - len(rest); consumed > maxHeader {
			t.Errorf("Read(%.20q...) took %d bytes, want at most %d", in, consumed, maxHeader)
		}
	}
}

// TestDstCutsOffASlowHeader: a header sent a byte at a time, each byte
// well within the timeout, is cut off once the timeout has passed since
// the wait began: the deadline is on the whole header.
func TestDstCutsOffASlowHeader(t *testing.T) {
	defer func(d time.Duration) { readTimeout = d }(readTimeout)
	readTimeout = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	header := "PROXY TCP4 10.0.0.2 192.0.2.1 40000 443\r\n"
	go func() {
		for i := range len(header) {
			if _, err := client.Write([]byte{header[i]}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // 2 s in all
		}
	}()
	nc, err := Listener(ln).Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	dst, err := Dst(nc)
	if err == nil {
		t.Fatalf("Dst = %v after %v, want the slow header cut off", dst, time.Since(start))
	}
	if d := time.Since(start); d > readTimeout+time.Second {
		t.Errorf("cut off after %v, want about %v", d, readTimeout)
	}
}

// FuzzRead: whatever the bytes, Read takes at most the longest header;
// what it accepts is a whole line it took exactly, whose destination
// Write writes back as the same line's destination.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		"PROXY TCP4 10.0.0.2 192.0.2.1 40000 443\r\nGET / HTTP/1.1\r\n",
		"PROXY TCP6 fd00::2 2001:db8::1 40000 443\r\n\x16\x03\x01",
		"PROXY TCP4 0.0.0.0 192.0.2.1 0 443\r\n",
		"PROXY UNKNOWN\r\n",
		"PROXY TCP4 10.0.0.2 192.0.2.1 40000 443\n",
		"PROXY TCP6 fd00::2 ::ffff:192.0.2.1 1 1\r\n",
		strings.Repeat("A", 300),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReader(strings.NewReader(string(in)))
		dst, err := Read(br)
		rest, _ := io.ReadAll(br)
		consumed := len(in) - len(rest)
		if consumed > maxHeader {
			t.Fatalf("took %d bytes, want at most %d", consumed, maxHeader)
		}
		if err != nil {
			return
		}
		line := string(in[:consumed])
		if !strings.HasPrefix(line, "PROXY TCP") || !strings.HasSuffix(line, "\r\n") || strings.Count(line, "\n") != 1 {
			t.Fatalf("accepted %q", line)
		}
		if !dst.IsValid() || dst.Port() == 0 || dst.Addr().Zone() != "" || dst.Addr().Is4In6() {
			t.Fatalf("accepted %q as %v", line, dst)
		}
		var b strings.Builder
		if err := Write(&b, netip.AddrPort{}, dst); err != nil {
			t.Fatalf("Write(%v): %v", dst, err)
		}
		again, err := Read(bufio.NewReader(strings.NewReader(b.String())))
		if err != nil || again != dst {
			t.Fatalf("%q read back as %v, %v; want %v", b.String(), again, err, dst)
		}
	})
}
