package secrets

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// errTrailer ends the body of an inspected request whose trailers
// carry a secret's placeholder.
var errTrailer = errors.New("a secret's placeholder in the request's trailers")

// TrailerGuard reads an inspected request's body and, at its end, looks
// for a secret's placeholder in the request's trailers, which the client
// sends after the body: one found ends the body with an error instead of
// its end, so that the request upstream is cut off, and Found names its
// secret. (Trailers never get a value, and the gateway sends the
// upstream none of their values; the guard makes the attempt a block
// that is logged.) It is safe to call Found while the body is read.
type TrailerGuard struct {
	set   *Set
	req   *http.Request
	r     io.Reader
	found atomic.Pointer[Secret]
}

// GuardTrailers returns the TrailerGuard of req, reading its body from
// body.
func (s *Set) GuardTrailers(req *http.Request, body io.Reader) *TrailerGuard {
	return &TrailerGuard{set: s, req: req, r: body}
}

func (g *TrailerGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if err == io.EOF && len(g.set.list()) > 0 {
		for k, vs := range g.req.Trailer {
			sec := g.set.PlaceholderIn(k)
			for _, v := range vs {
				if sec == nil {
					sec = g.set.PlaceholderIn(v)
				}
			}
			if sec != nil {
				g.found.Store(sec)
				return n, errTrailer
			}
		}
	}
	return n, err
}

// Found is the secret whose placeholder the request's trailers carried,
// nil while none has been found.
func (g *TrailerGuard) Found() *Secret { return g.found.Load() }

// BlockTrailer turns closeRec, the close record of an inspected request
// to host whose trailers carried the secret's placeholder
// (TrailerGuard), into the record of its block by Rule, and returns the
// decision.
func (s *Secret) BlockTrailer(closeRec *decisionlog.Record, host string) netpolicy.Decision {
	d := netpolicy.Decision{Action: netpolicy.Block, Rule: Rule,
		Reason: fmt.Sprintf("secret %s's placeholder in a trailer of a request to %s: a trailer never carries a value; the request was cut off at its trailers", s.name, host)}
	closeRec.Action, closeRec.Rule, closeRec.Reason, closeRec.Enforced = string(d.Action), d.Rule, d.Reason, true
	closeRec.Secret, closeRec.Status, closeRec.Error = s.name, http.StatusForbidden, errTrailer.Error()
	return d
}
