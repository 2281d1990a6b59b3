package gateway

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// refuseOverTunnels logs the refusal of the tunnel rec decided, by its
// client's tunnel cap (Limits.MaxTunnelsPerClient): a block by rule guard,
// status 429 for a CONNECT (proxied) and 0 for a captured connection,
// closed unanswered, with cap decisionlog.CapTunnels. A flood of them is folded
// as the refused connections are (refusalLimiter.log): the first refusalBurst
// have records of their own, count 1; then at most one a refusalEvery,
// whose count says how many it stands for, and what is still folded is
// written refusalEvery after it began, or by Close. So every refusal is
// counted in the log, and no number of them writes more than a few
// records a second. The caller answers the client.
func (p *pipeline) refuseOverTunnels(c *conn, rec *decisionlog.Record, start time.Time, proxied bool) {
	s := p.s
	rec.Action, rec.Rule, rec.Enforced, rec.Status = string(netpolicy.Block), netpolicy.RuleGuard, true, http.StatusTooManyRequests
	if !proxied {
		rec.Status = 0 // closed unanswered, as a captured connection's refusals are
	}
	rec.Reason = fmt.Sprintf("client %s has %d tunnels open, the limit per client", c.client.Addr(), s.limits.MaxTunnelsPerClient)
	s.metrics.decided(start)
	// Counted after it is logged (or folded), as refusalLimiter.log's.
	defer s.metrics.request(rec.Kind, netpolicy.Block)
	folded := *rec // rec may be reused once this returns; the fold keeps its own
	s.refusals.overTunnels.fold(refusal{client: c.client.Addr(), remote: c.clientText, status: rec.Status, rec: &folded})
}
