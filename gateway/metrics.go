package gateway

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Metrics are the gateway's counters, kept in a registry of the gateway's
// own (not the global one), served at /metrics by the management API.
type Metrics struct {
	Registry *prometheus.Registry

	requests    *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	tunnels     prometheus.Gauge
	decisionLat prometheus.Histogram
	panics      *prometheus.CounterVec

	// Counters bound to their labels once, off the per-request path.
	byKindAction      map[[2]string]prometheus.Counter
	bytesOut, bytesIn prometheus.Counter

	// Plain counters for /v1/status, kept beside the Prometheus ones.
	allowed, blocked, intercepted atomic.Uint64
	openTunnels                   atomic.Int64
}

func newMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbx_gateway_requests_total",
			Help: "Requests, tunnels and DNS queries decided, by kind (http, connect, dns, conn) and action (allow, block, intercept).",
		}, []string{"kind", "action"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbx_gateway_bytes_total",
			Help: "Bytes relayed, by direction (out: client to upstream, in: upstream to client).",
		}, []string{"direction"}),
		tunnels: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sbx_gateway_open_tunnels",
			Help: "CONNECT tunnels open now.",
		}),
		decisionLat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sbx_gateway_decision_seconds",
			Help:    "Time from a request's head being read to its verdict, guard and DNS included.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
		}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbx_gateway_panics_total",
			Help: "Panics recovered while serving one connection, query or tunnel, which ended it alone, by where (proxy, transparent, dns, dns_udp, tunnel, inspected).",
		}, []string{"where"}),
	}
	m.Registry.MustRegister(m.requests, m.bytes, m.tunnels, m.decisionLat, m.panics)
	m.byKindAction = map[[2]string]prometheus.Counter{}
	for _, kind := range []string{decisionlog.KindHTTP, decisionlog.KindConnect, decisionlog.KindDNS} {
		for _, action := range []netpolicy.Action{netpolicy.Allow, netpolicy.Block, netpolicy.Intercept} {
			m.byKindAction[[2]string{kind, string(action)}] = m.requests.WithLabelValues(kind, string(action))
		}
	}
	m.bytesOut, m.bytesIn = m.bytes.WithLabelValues("out"), m.bytes.WithLabelValues("in")
	return m
}

// panicked counts a panic recovered where (a label of
// sbx_gateway_panics_total).
func (m *Metrics) panicked(where string) { m.panics.WithLabelValues(where).Inc() }

// request counts one decided request.
func (m *Metrics) request(kind string, action netpolicy.Action) {
	if c, ok := m.byKindAction[[2]string{kind, string(action)}]; ok {
		c.Inc()
	} else {
		m.requests.WithLabelValues(kind, string(action)).Inc()
	}
	switch action {
	case netpolicy.Allow:
		m.allowed.Add(1)
	case netpolicy.Block:
		m.blocked.Add(1)
	case netpolicy.Intercept:
		m.intercepted.Add(1)
	}
}

// relayed counts bytes of a finished request or tunnel.
func (m *Metrics) relayed(out, in int64) {
	m.bytesOut.Add(float64(out))
	m.bytesIn.Add(float64(in))
}

// decided observes the time a verdict took.
func (m *Metrics) decided(start time.Time) {
	m.decisionLat.Observe(time.Since(start).Seconds())
}

// tunnelOpened and tunnelClosed track open tunnels.
func (m *Metrics) tunnelOpened() { m.tunnels.Inc(); m.openTunnels.Add(1) }
func (m *Metrics) tunnelClosed() { m.tunnels.Dec(); m.openTunnels.Add(-1) }

// Counts returns the number of allowed, blocked and intercepted requests
// and the open tunnels, for /v1/status and sbx ps.
func (m *Metrics) Counts() (allowed, blocked, intercepted uint64, openTunnels int64) {
	return m.allowed.Load(), m.blocked.Load(), m.intercepted.Load(), m.openTunnels.Load()
}
