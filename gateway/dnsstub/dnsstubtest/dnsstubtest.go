// Package dnsstubtest is for tests only: it builds the DNS queries a
// sandbox's stub resolver sends and exchanges them with a DNS stub over
// UDP or TCP, for the tests of gateway/dnsstub and of gateway, which
// serves the stub. It imports no sbx package.
package dnsstubtest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Query describes a query the tests build.
type Query struct {
	Name  string
	Type  dnsmessage.Type
	Class dnsmessage.Class // 0: IN
	EDNS  int              // the UDP size offered in an OPT record; 0: no OPT
}

// Pack builds q with id as a real stub resolver would (RD set).
func (q Query) Pack(t testing.TB, id uint16) []byte {
	t.Helper()
	name, err := dnsmessage.NewName(q.Name)
	if err != nil {
		t.Fatalf("NewName(%q): %v", q.Name, err)
	}
	class := q.Class
	if class == 0 {
		class = dnsmessage.ClassINET
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: name, Type: q.Type, Class: class}); err != nil {
		t.Fatal(err)
	}
	if q.EDNS > 0 {
		b.StartAdditionals()
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(q.EDNS, dnsmessage.RCodeSuccess, false)
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// ExchangeUDP sends msg to addr from a new socket and returns the answer,
// or an error when none comes within a second.
func ExchangeUDP(t testing.TB, addr string, msg []byte) ([]byte, error) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// ExchangeTCP sends every message on one new connection to addr, all at
// once, and returns the answers read until as many came, or the
// connection ended (a reset too, even while connecting), or a second
// passed.
func ExchangeTCP(t testing.TB, addr string, msgs ...[]byte) [][]byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNRESET) {
			return nil
		}
		t.Fatal(err)
	}
	defer c.Close()
	var out []byte
	for _, m := range msgs {
		out = binary.BigEndian.AppendUint16(out, uint16(len(m)))
		out = append(out, m...)
	}
	if _, err := c.Write(out); err != nil {
		return nil
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	var resps [][]byte
	for range msgs {
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			break
		}
		resp := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, resp); err != nil {
			t.Fatalf("reading a DNS answer over TCP: %v", err)
		}
		resps = append(resps, resp)
	}
	return resps
}

// Unpack parses a response or fails the test.
func Unpack(t testing.TB, resp []byte) dnsmessage.Message {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		t.Fatalf("unpacking the answer %x: %v", resp, err)
	}
	return m
}
