package dnsstub

import (
	"bytes"
	"fmt"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// buildWithCompression is how the stub built its responses before it
// appended the answer and the OPT record itself: all of it by dnsmessage's
// Builder, with compression. TestBuildAsDNSMessage holds build to it.
func buildWithCompression(r *dnsReply, out []byte, rcode dnsmessage.RCode) ([]byte, error) {
	h := r.header
	h.RCode = rcode & 0xf
	b := dnsmessage.NewBuilder(out, h)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if r.question != nil {
		if err := b.Question(*r.question); err != nil {
			return nil, err
		}
	}
	if r.hasA {
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		rh := dnsmessage.ResourceHeader{Name: r.question.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
		if err := b.AResource(rh, dnsmessage.AResource{A: r.a}); err != nil {
			return nil, err
		}
	}
	if r.edns {
		if err := b.StartAdditionals(); err != nil {
			return nil, err
		}
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(dnsMaxPayload, rcode, false)
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// TestBuildAsDNSMessage: the stub's responses are, byte for byte, what
// dnsmessage's Builder with compression writes, for every shape of
// response it makes (with and without a question, an answer, an OPT
// record, over UDP and after TCP's length), whatever the rcode.
func TestBuildAsDNSMessage(t *testing.T) {
	names := []string{"api.test.", "n1.pkg.test.", "a.b.c.d.e.f.example.com.", ".", "x."}
	rcodes := []dnsmessage.RCode{dnsmessage.RCodeSuccess, dnsmessage.RCodeNameError, dnsmessage.RCodeFormatError,
		dnsmessage.RCodeServerFailure, dnsmessage.RCodeRefused, dnsmessage.RCodeNotImplemented, rcodeBadVers}
	for _, name := range names {
		for _, qtype := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
			for _, rcode := range rcodes {
				for shape := range 16 {
					q := dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: qtype, Class: dnsmessage.ClassINET}
					r := dnsReply{
						header: dnsmessage.Header{ID: 0xbeef, Response: true, RecursionDesired: true, RecursionAvailable: true,
							Truncated: shape&8 != 0},
						a:    [4]byte{198, 18, 0, byte(shape)},
						edns: shape&1 != 0,
					}
					if shape&2 != 0 {
						r.question = &q
						r.hasA = shape&4 != 0
					}
					prefix := []byte{}
					if shape&8 != 0 {
						prefix = []byte{0, 0} // TCP's length, written by the caller
					}
					want, wantErr := buildWithCompression(&r, bytes.Clone(prefix), rcode)
					got, err := r.build(bytes.Clone(prefix), rcode)
					what := fmt.Sprintf("%s %v rcode %d shape %04b", name, qtype, rcode, shape)
					if (err != nil) != (wantErr != nil) {
						t.Fatalf("%s: error %v, want %v", what, err, wantErr)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("%s:\n got %x\nwant %x", what, got, want)
					}
				}
			}
		}
	}
}

// TestBuildAllocs: building an answer with an OPT record allocates
// nothing but what the caller's buffer cannot hold.
func TestBuildAllocs(t *testing.T) {
	q := dnsmessage.Question{Name: dnsmessage.MustNewName("n1.pkg.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	r := dnsReply{header: dnsmessage.Header{ID: 1, Response: true}, question: &q, hasA: true, edns: true, a: [4]byte{198, 18, 0, 1}}
	out := make([]byte, 0, dnsMaxPayload)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := r.build(out[:0], dnsmessage.RCodeSuccess); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("build allocated %v times, want 0", n)
	}
}
