package gateway

import (
	"context"
	"net"
	"net/netip"
	"strconv"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/dnsstub"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The DNS stub of docs/capture.md is gateway/dnsstub's: the server makes
// one in New and hands it what it needs of the gateway as a dnsGateway.
// Start serves it on Config.DNS, over UDP (Stub.ServeUDP) and over TCP
// through serveListener, so that its connections count against a
// client's cap with the proxy's and Close ends them.

// newDNSStub returns the DNS stub of s, whose fake addresses are s.fakeIPs.
func newDNSStub(s *Server) (*dnsstub.Stub, error) {
	return dnsstub.New(dnsstub.Config{
		Store: s.cfg.Store, Gateway: dnsGateway{s}, Names: s.fakeIPs, Logger: s.logger,
		IdleTimeout: s.limits.DNSIdleTimeout, ReadTimeout: s.limits.HeaderReadTimeout,
	})
}

// serveDNSConn returns the handler of the DNS stub's TCP listener
// (serveListener's): the stub answers the connection's queries.
func serveDNSConn(s *Server) func(context.Context, net.Conn) {
	return func(_ context.Context, c net.Conn) { s.dns.ServeConn(c) }
}

// dnsGateway is what the DNS stub uses of its server (dnsstub.Gateway).
type dnsGateway struct{ s *Server }

// NewID returns the id of a new record.
func (g dnsGateway) NewID() string { return strconv.FormatUint(g.s.connID.Add(1), 36) }

// IsClient reports whether Config.Clients lets ip ask.
func (g dnsGateway) IsClient(ip netip.Addr) bool { return g.s.isClient(ip) }

// RefuseQuery logs a query from outside Config.Clients, rate-bounded,
// with kind decisionlog.KindConn.
func (g dnsGateway) RefuseQuery(client netip.AddrPort) {
	g.s.refusals.notClients.log(client.Addr(), client.String(), 0, notClientReason)
}

// ServesOn makes the stub's address one of the gateway's own.
func (g dnsGateway) ServesOn(ap netip.AddrPort) { g.s.AddOwnAddr(ap) }

// Override decides the names the policy does not: a name with a secret's
// placeholder, and a mocked LLM host.
func (g dnsGateway) Override(raw, host string) (netpolicy.Decision, string, bool) {
	if sec := g.s.secrets.PlaceholderIn(raw); sec != nil {
		// A secret's placeholder in a name (docs/secrets.md): the name
		// does not exist, in every mode, and gets no fake address to
		// connect to; the attempt is logged by rule secret.
		name := host
		if name == "" {
			name = raw // as the record names it
		}
		return sec.Block(name), sec.Name(), true
	}
	if host != "" && g.s.mocks.forHost(host) != nil {
		// A mocked LLM host is answered by the gateway itself
		// (docs/mock-llm.md): an agent that resolves it must reach the
		// mock, whatever the policy says of the real host.
		return netpolicy.Decision{Action: netpolicy.Allow, Rule: RuleMockLLM, Reason: "mock LLM: the gateway answers " + host + " itself"}, "", true
	}
	return netpolicy.Decision{}, "", false
}

// Decided writes the record of a query, with the process that owns the
// client's socket, and counts it.
func (g dnsGateway) Decided(rec *decisionlog.Record, network string, client netip.AddrPort) {
	setProcess(rec, g.s.owner(network, client, netip.AddrPort{}))
	g.s.metrics.request(decisionlog.KindDNS, netpolicy.Action(rec.Action))
	g.s.emit(rec)
}

// Panicked counts a panic answering a UDP query and writes its record.
func (g dnsGateway) Panicked(rec *decisionlog.Record) {
	g.s.metrics.panicked("dns_udp")
	g.s.emit(rec)
}

// listenDNS opens the DNS stub's UDP socket and TCP listener on the same
// addr, bound to the network interface iface when it is not "" (see
// Options.ListenInterface). With port 0 both get the same free port.
func listenDNS(ctx context.Context, addr, iface string) (net.PacketConn, net.Listener, error) {
	lc, err := listenConfig(iface)
	if err != nil {
		return nil, nil, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	for attempt := 0; ; attempt++ {
		pc, err := lc.ListenPacket(ctx, "udp", addr)
		if err != nil {
			return nil, nil, err
		}
		_, got, _ := net.SplitHostPort(pc.LocalAddr().String())
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, got))
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		// A free UDP port may be taken for TCP: with port 0, try another.
		if port != "0" || attempt == 10 {
			return nil, nil, err
		}
	}
}
