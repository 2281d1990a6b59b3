package api

import (
	"net/http"

	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Gateway is what the management API acts on, which the gateway keeps:
// package gateway implements it over its proxy and hands it to the API,
// and a test can serve the API over a Gateway of its own. The API imports
// no package of the gateway's.
type Gateway interface {
	// Store is the store of the running policy: GET /v1/policy reads it
	// and the policy changes go through it, which records each.
	Store() *netpolicy.Store
	// Counts returns the decisions made since the gateway started and the
	// tunnels open now, for GET /v1/status.
	Counts() Counts
	// Metrics serves GET /metrics, in the Prometheus text format.
	Metrics() http.Handler
	// Mocks returns the mock LLMs the mock endpoints drive: by the host
	// they answer for (--mock-llm), and by the name of the policy's script
	// (response: {llm: NAME}). Neither map changes while the API serves.
	Mocks() (hosts, scripts map[string]*mockllm.Responder)
}
