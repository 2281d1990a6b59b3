package selftest

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"

	"github.com/sbx-dev/sbx/sandbox"
)

// catalogue is the escape catalogue: every way out of a sandbox that sbx
// knows of (docs/network.md and docs/capture.md), each against a target
// that answers with out's secret, and the one allowed target. With
// hostLayer (the probed sandbox's namespace rules flushed, nothing
// captured) it is the cases that go through the network, each of which
// the host's rules alone must stop, and the proxy still reached.
func catalogue(out *outside, t *targets, hostLayer bool) []testCase {
	m := checkMaker{out: out, t: t, secret: hasSecret(out.secret)}
	cases := slices.Concat(
		[]testCase{m.allowedCase()},
		m.outsideCases(),
		m.neighbourCases(),
		m.hostCases(),
	)
	if hostLayer {
		return hostLayerCases(cases)
	}
	for i := range cases {
		cases[i].failFast = true
	}
	return cases
}

// probeLine is what the probe sends a server that answers any line.
const probeLine = "probe\n"

// hostPort joins a and port.
func hostPort(a netip.Addr, port int) string { return net.JoinHostPort(a.String(), strconv.Itoa(port)) }

// httpGet is an HTTP/1.1 request for target with the Host host.
func httpGet(target, host string) string {
	return fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, host)
}

// checkMaker makes the catalogue's checks against the outside's servers
// and the targets.
type checkMaker struct {
	out    *outside
	t      *targets
	secret func(observation) bool // the outside's secret came back
}

// tcpTo sends a line to target over TCP, whose server counts in hits.
func (m checkMaker) tcpTo(id, target string, hits *hitCounter) caseCheck {
	return caseCheck{what: "TCP to " + target, attempt: probeAttempt{ID: id, Kind: attemptTCP, Addr: target, Send: probeLine},
		reached: m.secret, hits: hits.counts}
}

// udpTo sends a datagram to target, whose server counts in hits.
func (m checkMaker) udpTo(id, target string, hits *hitCounter) caseCheck {
	return caseCheck{what: "UDP to " + target, attempt: probeAttempt{ID: id, Kind: attemptUDP, Addr: target, Send: probeLine},
		reached: m.secret, hits: hits.counts}
}

// ping sends an ICMP echo request to the outside (kind: from a ping or a
// raw socket, which what says).
func (m checkMaker) ping(id, kind, what string) caseCheck {
	out := m.out
	token, controlToken := "sbx-selftest-"+id+"-"+randomHex(6), "sbx-selftest-control-"+randomHex(6)
	return caseCheck{
		what:    fmt.Sprintf("ICMP echo to %s from %s", out.addr, what),
		attempt: probeAttempt{ID: id, Kind: kind, Addr: out.addr.String(), Token: token},
		// From the host, as root, with a raw socket: a ping socket
		// needs net.ipv4.ping_group_range, which may exclude root.
		control: probeAttempt{Kind: attemptPingRaw, Addr: out.addr.String(), Token: controlToken},
		reached: echoed,
		hits: func() (int64, int64) {
			n := out.icmp.seen(token)
			return n, n + out.icmp.seen(controlToken)
		},
	}
}

// dns asks the outside's DNS server (kind: over UDP or TCP, which what
// says) for a name of exfilDomain; the server counts in hits.
func (m checkMaker) dns(id, kind, what string, hits *hitCounter) caseCheck {
	name := "t" + randomHex(6) + "." + exfilDomain
	return caseCheck{
		what:    fmt.Sprintf("a DNS query for %s to %s over %s", name, hostPort(m.out.addr, portDNS), what),
		attempt: probeAttempt{ID: id, Kind: kind, Addr: hostPort(m.out.addr, portDNS), Name: name},
		reached: hasAddr(m.out.dnsAnswer.String()),
		hits:    hits.counts,
		extra:   stubAnswered(m.out.dnsAnswer.String()),
	}
}

// allowedCase reaches the allowed target through the probed sandbox's
// proxy, and directly, which capture sends to the gateway too.
func (m checkMaker) allowedCase() testCase {
	allowedURL := fmt.Sprintf("http://%s:%d/", reachName, portHTTP)
	host := fmt.Sprintf("%s:%d", reachName, portHTTP)
	control := probeAttempt{Kind: attemptTCP, Addr: hostPort(m.out.addr, portHTTP), Send: httpGet("/", host)}
	return testCase{name: "allowed target through the gateway", allowed: true, checks: []caseCheck{
		{
			what:    "a request for " + allowedURL + " to the proxy",
			attempt: probeAttempt{ID: "allowed-proxy", Kind: attemptTCP, Addr: hostPort(m.t.probedGW, int(m.t.gatewayPort)), Send: httpGet(allowedURL, host)},
			control: control,
			reached: m.secret,
		},
		{
			what:    "a request for " + allowedURL + " made directly (captured)",
			attempt: probeAttempt{ID: "allowed-direct", Kind: attemptTCP, Name: reachName, Port: portHTTP, Send: httpGet("/", host)},
			control: control,
			reached: m.secret,
			extra:   resolvedToFake,
		},
	}}
}

// outsideCases are the ways out to the outside: TCP by address and by
// name, UDP, ICMP, IPv6 and DNS to an outside resolver.
func (m checkMaker) outsideCases() []testCase {
	out := m.out
	return []testCase{
		{name: "tcp out by address", checks: []caseCheck{m.tcpTo("tcp-addr", hostPort(out.addr, portTCPByAddr), out.tcpByAddr)}},
		{name: "tcp out by name", checks: []caseCheck{{
			what:    fmt.Sprintf("TCP to %s:%d (a port the policy does not allow)", reachName, portTCPByName),
			attempt: probeAttempt{ID: "tcp-name", Kind: attemptTCP, Name: reachName, Port: portTCPByName, Send: probeLine},
			control: probeAttempt{Kind: attemptTCP, Addr: hostPort(out.addr, portTCPByName), Send: probeLine},
			reached: m.secret, hits: out.tcpByName.counts, extra: resolvedToFake,
		}}},
		{name: "udp out", checks: []caseCheck{m.udpTo("udp", hostPort(out.addr, portUDP), out.udp)}},
		{name: "icmp echo out (ping socket)", checks: []caseCheck{m.ping("ping", attemptPing, "a ping socket")}},
		{name: "icmp echo out (raw socket)", checks: []caseCheck{m.ping("ping-raw", attemptPingRaw, "a raw socket")}},
		ipv6Case(out, probeLine),
		{name: "dns to an outside resolver over udp", checks: []caseCheck{m.dns("dns-udp", attemptDNSUDP, "UDP", out.dnsUDP)}},
		{name: "dns to an outside resolver over tcp", checks: []caseCheck{m.dns("dns-tcp", attemptDNSTCP, "TCP", out.dnsTCP)}},
	}
}

// neighbourCases are the ways to what is next to the sandbox: the
// gateway's other ports, and the second sandbox's gateway and address.
func (m checkMaker) neighbourCases() []testCase {
	t := m.t
	otherProxy := hostPort(t.otherGW, int(t.otherPort))
	otherDNS := hostPort(t.otherGW, sandbox.DefaultDNSPort)
	otherHost := fmt.Sprintf("%s:%d", otherName, portOtherHTTP)
	return []testCase{
		{name: "the gateway's other ports", checks: []caseCheck{
			m.tcpTo("gw-tcp", t.gwTCP.String(), t.gwTCPHits),
			m.udpTo("gw-udp", t.gwUDP.String(), t.gwUDPHits),
		}},
		{name: "another sandbox's gateway", checks: []caseCheck{
			{
				what:         fmt.Sprintf("a request for http://%s/ to the second sandbox's proxy %s (its policy allows it)", otherHost, otherProxy),
				attempt:      probeAttempt{ID: "other-proxy", Kind: attemptTCP, Addr: otherProxy, Send: httpGet("http://"+otherHost+"/", otherHost)},
				controlNetns: t.otherNetns,
				reached:      m.secret, hits: m.out.otherHTTP.counts,
			},
			{
				what:         "a DNS query to the second sandbox's DNS stub " + otherDNS,
				attempt:      probeAttempt{ID: "other-dns", Kind: attemptDNSUDP, Addr: otherDNS, Name: otherName},
				controlNetns: t.otherNetns,
				reached:      dnsAnswered,
			},
		}},
		{name: "another sandbox's address", checks: []caseCheck{{
			what:         "TCP to " + hostPort(t.otherAddr, portOther),
			attempt:      probeAttempt{ID: "other-addr", Kind: attemptTCP, Addr: hostPort(t.otherAddr, portOther), Send: probeLine},
			controlNetns: t.otherNetns,
			reached:      m.secret, hits: t.otherHits.counts,
		}}},
	}
}

// hostCases are the ways to the host's own powers: the management API,
// raw sockets, capabilities and new namespaces.
func (m checkMaker) hostCases() []testCase {
	t := m.t
	return []testCase{
		{name: "the management API's socket", checks: []caseCheck{{
			what:    "the socket " + t.apiSocket,
			attempt: probeAttempt{ID: "api-socket", Kind: attemptUnix, Path: t.apiSocket, Send: httpGet("/healthz", "localhost")},
			reached: socketExists,
		}}},
		{name: "the management API's TCP address", checks: []caseCheck{{
			what:    "GET /healthz to " + t.apiAddr.String(),
			attempt: probeAttempt{ID: "api-tcp", Kind: attemptTCP, Addr: t.apiAddr.String(), Send: httpGet("/healthz", t.apiAddr.String())},
			reached: apiAnswered,
		}}},
		{name: "raw sockets", checks: []caseCheck{{
			what:    "opening raw IP and packet sockets",
			attempt: probeAttempt{ID: "raw", Kind: attemptRawSocket},
			reached: rawOpened,
		}}},
		{name: "capabilities", checks: []caseCheck{{
			what:    "the probe's capabilities, no_new_privs and seccomp",
			attempt: probeAttempt{ID: "caps", Kind: attemptCaps},
			reached: securityLoose,
		}}},
		{name: "new namespaces", checks: []caseCheck{
			netnsCheck("netns-net", "net", m.out),
			netnsCheck("netns-user", "user+net", m.out),
		}},
	}
}

// hostLayerCases are the cases of cases that the host's rules alone must
// stop (those that do not go through the network, or need the DNS stub,
// are left out), renamed; the allowed target is reached through the
// proxy only, as nothing is captured, and no DNS answer is expected. The
// host drops what it refuses from a sandbox that rewrote its rules, so
// these attempts may hang until the probe gives up.
func hostLayerCases(cases []testCase) []testCase {
	keep := map[string]bool{
		"allowed target through the gateway": true, "tcp out by address": true, "udp out": true, "ipv6 out": true,
		"dns to an outside resolver over udp": true, "dns to an outside resolver over tcp": true,
		"the gateway's other ports": true, "another sandbox's gateway": true, "another sandbox's address": true,
		"the management API's TCP address": true,
	}
	var kept []testCase
	for _, c := range cases {
		if !keep[c.name] {
			continue
		}
		c.name += HostLayerSuffix
		c.checks = slices.DeleteFunc(slices.Clone(c.checks), func(ch caseCheck) bool { return ch.attempt.Name != "" && ch.attempt.Kind == attemptTCP })
		for i := range c.checks {
			c.checks[i].extra = nil
		}
		kept = append(kept, c)
	}
	return kept
}

// ipv6Case tries TCP and UDP to the outside's IPv6 address, unless the
// host has IPv6 off.
func ipv6Case(out *outside, line string) testCase {
	c := testCase{name: "ipv6 out"}
	if out.ipv6Off != "" {
		c.skip = out.ipv6Off
		return c
	}
	target := net.JoinHostPort(out.addr6.String(), strconv.Itoa(portIPv6))
	secret := hasSecret(out.secret)
	c.checks = []caseCheck{
		{what: "TCP to " + target, attempt: probeAttempt{ID: "tcp6", Kind: attemptTCP, Addr: target, Send: line}, reached: secret, hits: out.tcp6.counts},
		{what: "UDP to " + target, attempt: probeAttempt{ID: "udp6", Kind: attemptUDP, Addr: target, Send: line}, reached: secret, hits: out.udp6.counts},
	}
	return c
}

// netnsCheck tries to make new namespaces (which: net, or user+net): the
// control, on the host, shows they can be made at all; inside they must
// not be, or give nothing that reaches the outside.
func netnsCheck(id, which string, out *outside) caseCheck {
	return caseCheck{
		what:           "new " + which + " namespaces",
		attempt:        probeAttempt{ID: id, Kind: attemptNetns, Name: which, Addr: net.JoinHostPort(out.addr.String(), strconv.Itoa(portTCPByAddr))},
		reached:        namespacesUsable(out.secret),
		controlReached: namespacesMade,
		note: func(o observation) string {
			if o.Created {
				return fmt.Sprintf("%s namespaces could be made, with nothing in them: %s", which, clip(o.Data, 100))
			}
			return ""
		},
	}
}
