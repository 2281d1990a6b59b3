package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// apiGateway is what the management API acts on (api.Gateway): the
// server's policy store, counters, metrics and mocks.
type apiGateway struct{ s *Server }

var _ api.Gateway = apiGateway{}

func (g apiGateway) Store() *netpolicy.Store { return g.s.Store() }

func (g apiGateway) Counts() api.Counts {
	allowed, blocked, intercepted, tunnels := g.s.Metrics().Counts()
	return api.Counts{Allowed: allowed, Blocked: blocked, Intercepted: intercepted, OpenTunnels: tunnels}
}

func (g apiGateway) Metrics() http.Handler {
	return promhttp.HandlerFor(g.s.Metrics().Registry, promhttp.HandlerOpts{})
}

func (g apiGateway) Mocks() (hosts, scripts map[string]*mockllm.Responder) {
	return g.s.mocks.hosts, g.s.mocks.scripts
}

func (g apiGateway) Recorders() map[string]*mockllm.Recorder { return g.s.cfg.RecordLLM }

func (g apiGateway) Approvals() []api.Approval { return g.s.approvals.List() }

func (g apiGateway) AnswerApproval(id string, a api.ApprovalAnswer) (api.Approval, error) {
	return g.s.approvals.Answer(id, approval.Answer{Allow: a.Answer == api.AnswerAllow, Scope: approval.Scope(a.Scope), By: a.By})
}
