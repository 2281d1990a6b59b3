package sandbox

import (
	"fmt"
	"strings"
)

// NetPlan is what one sandbox's network is made of: its names, its /30
// and the gateway's port on the host side. The rule sets it renders are
// loaded with one iptables-restore (and one ip6tables-restore) per side.
type NetPlan struct {
	Names       Names
	Subnet      Subnet
	GatewayPort uint16
	// Capture, when set, sends what the sandbox tries without the proxy
	// to the gateway too (docs/capture.md); nil keeps the proxy port the
	// only way out, and everything else refused without a trace.
	Capture *Capture
}

// Capture is where a sandbox's rules send what they capture.
type Capture struct {
	// DNSPort is the DNS stub's port (UDP and TCP) on the host end's
	// address: every query to port 53, whatever the address, goes there.
	DNSPort uint16
	// TransparentPort is the port of the gateway's transparent listener,
	// on 127.0.0.1 inside the namespace: every other TCP connection is
	// redirected there.
	TransparentPort uint16
	// PacketGroup is the NFLOG group that reports every packet the rules
	// refuse (UDP but DNS, ICMP, other protocols) to the gateway.
	PacketGroup uint16
}

// Defaults of a Capture made by Start.
const (
	// DefaultDNSPort is the DNS stub's port on the host end: not 53,
	// where a DNS server of the host may listen on every address; the
	// rules send port 53 there.
	DefaultDNSPort = 3153
	// DefaultTransparentPort is the transparent listener's port on the
	// namespace's loopback, which the sandbox cannot bind itself.
	DefaultTransparentPort = 15001
	// DefaultPacketGroup is the NFLOG group of the refused packets; groups
	// belong to a network namespace, so every sandbox can use the same.
	DefaultPacketGroup = 1
)

// rules builds an iptables-restore document, adding the sandbox's comment
// to every rule.
type rules struct {
	b       strings.Builder
	comment string
}

func (r *rules) line(s string) { r.b.WriteString(s + "\n") }
func (r *rules) rule(format string, args ...any) {
	spec := fmt.Sprintf(format, args...)
	// The comment goes before the target, where iptables wants matches.
	head, target, _ := strings.Cut(spec, " -j ")
	r.b.WriteString(head + " -m comment --comment " + r.comment + " -j " + target + "\n")
}

// NamespaceRules returns the rule sets for inside the sandbox's namespace,
// to load before its link is up (docs/network.md): the only way out is TCP to
// the gateway's port; everything else is rejected at once (a TCP reset or
// an ICMP error, so it fails fast instead of hanging); IPv6 is refused
// whole but for loopback. Chains' policies drop, so a missing rule fails
// closed.
//
// With Capture (docs/capture.md), the nat table sends every UDP or TCP
// packet to port 53 to the DNS stub and redirects every other TCP
// connection (but to the proxy port) to the transparent listener on the
// namespace's loopback; what is still refused (UDP, ICMP, any other
// protocol) is reported through NFLOG first. The filter table's OUTPUT
// accepts the stub's port besides the proxy's; the nat rules change where
// a packet goes, never whether it may leave.
func (p NetPlan) NamespaceRules() (v4, v6 string) {
	r := rules{comment: p.Names.Comment}
	host, c := p.Subnet.Host, p.Capture
	if c != nil {
		r.line("*nat")
		r.line(":PREROUTING ACCEPT [0:0]")
		r.line(":INPUT ACCEPT [0:0]")
		r.line(":OUTPUT ACCEPT [0:0]")
		r.line(":POSTROUTING ACCEPT [0:0]")
		r.rule("-A OUTPUT -o lo -j RETURN")
		r.rule("-A OUTPUT -p udp --dport 53 -j DNAT --to-destination %s:%d", host, c.DNSPort)
		r.rule("-A OUTPUT -p tcp --dport 53 -j DNAT --to-destination %s:%d", host, c.DNSPort)
		r.rule("-A OUTPUT -d %s/32 -p tcp --dport %d -j RETURN", host, p.GatewayPort)
		r.rule("-A OUTPUT -p tcp -j REDIRECT --to-ports %d", c.TransparentPort)
		r.line("COMMIT")
	}
	r.line("*filter")
	r.line(":INPUT DROP [0:0]")
	r.line(":FORWARD DROP [0:0]")
	r.line(":OUTPUT DROP [0:0]")
	r.rule("-A INPUT -i lo -j ACCEPT")
	if c == nil {
		r.rule("-A INPUT -i %s -s %s/32 -p tcp --sport %d -m conntrack --ctstate ESTABLISHED -j ACCEPT",
			p.Names.InnerVeth, host, p.GatewayPort)
	} else {
		// Only what OUTPUT let out is established: the gateway's answers.
		r.rule("-A INPUT -i %s -s %s/32 -m conntrack --ctstate ESTABLISHED -j ACCEPT", p.Names.InnerVeth, host)
	}
	r.rule("-A OUTPUT -o lo -j ACCEPT")
	r.rule("-A OUTPUT -o %s -d %s/32 -p tcp --dport %d -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT",
		p.Names.InnerVeth, host, p.GatewayPort)
	if c != nil {
		r.rule("-A OUTPUT -o %s -d %s/32 -p udp --dport %d -j ACCEPT", p.Names.InnerVeth, host, c.DNSPort)
		r.rule("-A OUTPUT -o %s -d %s/32 -p tcp --dport %d -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT",
			p.Names.InnerVeth, host, c.DNSPort)
		// A redirected connection's packets keep the interface their
		// first route chose (the veth) for the whole OUTPUT hook, though
		// they go to the loopback: they are accepted by where the nat
		// rule sent them.
		r.rule("-A OUTPUT -d 127.0.0.1/32 -p tcp --dport %d -m conntrack --ctstate DNAT -j ACCEPT", c.TransparentPort)
		r.rule("-A OUTPUT -j NFLOG --nflog-group %d --nflog-size 128", c.PacketGroup)
	}
	r.rule("-A OUTPUT -p tcp -j REJECT --reject-with tcp-reset")
	r.rule("-A OUTPUT -j REJECT --reject-with icmp-admin-prohibited")
	r.line("COMMIT")
	v4 = r.b.String()

	r = rules{comment: p.Names.Comment}
	r.line("*filter")
	r.line(":INPUT DROP [0:0]")
	r.line(":FORWARD DROP [0:0]")
	r.line(":OUTPUT DROP [0:0]")
	r.rule("-A INPUT -i lo -j ACCEPT")
	r.rule("-A OUTPUT -o lo -j ACCEPT")
	if c != nil {
		r.rule("-A OUTPUT -j NFLOG --nflog-group %d --nflog-size 128", c.PacketGroup)
	}
	r.rule("-A OUTPUT -p tcp -j REJECT --reject-with tcp-reset")
	r.rule("-A OUTPUT -j REJECT --reject-with icmp6-adm-prohibited")
	r.line("COMMIT")
	return v4, r.b.String()
}

// HostTeardownRules returns the rule sets, for iptables-restore
// --noflush, that undo what HostRules added for the sandbox named n, in one
// atomic step per protocol. They fail whole when something is missing (a
// partial setup); the caller then removes what is there piece by piece.
func HostTeardownRules(n Names) (v4, v6 string) {
	build := func(jumps [][3]string, chains []string) string {
		r := rules{comment: n.Comment}
		r.line("*filter")
		for _, j := range jumps {
			r.rule("-D %s %s %s -j %s", j[0], j[1], n.HostVeth, j[2])
		}
		for _, c := range chains {
			r.line("-F " + c)
		}
		for _, c := range chains {
			r.line("-X " + c)
		}
		r.line("COMMIT")
		return r.b.String()
	}
	v4 = build([][3]string{{"INPUT", "-i", n.ChainIn}, {"INPUT", "! -i", n.ChainGW}, {"FORWARD", "-i", n.ChainFwd}, {"FORWARD", "-o", n.ChainFwd}},
		[]string{n.ChainIn, n.ChainGW, n.ChainFwd})
	v6 = build([][3]string{{"INPUT", "-i", n.ChainIn}, {"FORWARD", "-i", n.ChainIn}, {"FORWARD", "-o", n.ChainIn}},
		[]string{n.ChainIn})
	return v4, v6
}

// HostRules returns the rule sets for the host, to load with
// iptables-restore --noflush: a chain per direction for this sandbox, so
// that from its veth only TCP to the gateway's port (and, with Capture,
// UDP and TCP to its DNS stub's) is accepted and nothing is forwarded
// either way, whatever the namespace's own rules say (the second layer of
// docs/network.md); and a chain that refuses the gateway's ports to anything
// that does not come in through the veth (a process on the host, another
// interface): the gateway serves its sandbox alone. IPv6 from or to the
// veth is dropped whole.
func (p NetPlan) HostRules() (v4, v6 string) {
	n := p.Names
	host, c := p.Subnet.Host, p.Capture
	r := rules{comment: n.Comment}
	r.line("*filter")
	r.line(":" + n.ChainIn + " - [0:0]")
	r.line(":" + n.ChainFwd + " - [0:0]")
	r.line(":" + n.ChainGW + " - [0:0]")
	r.rule("-A %s -d %s/32 -p tcp --dport %d -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT", n.ChainIn, host, p.GatewayPort)
	if c != nil {
		r.rule("-A %s -d %s/32 -p udp --dport %d -j ACCEPT", n.ChainIn, host, c.DNSPort)
		r.rule("-A %s -d %s/32 -p tcp --dport %d -m conntrack --ctstate NEW,ESTABLISHED -j ACCEPT", n.ChainIn, host, c.DNSPort)
	}
	r.rule("-A %s -p tcp -j REJECT --reject-with tcp-reset", n.ChainIn)
	r.rule("-A %s -j REJECT --reject-with icmp-admin-prohibited", n.ChainIn)
	r.rule("-A %s -j DROP", n.ChainFwd)
	r.rule("-A %s -d %s/32 -p tcp --dport %d -j REJECT --reject-with tcp-reset", n.ChainGW, host, p.GatewayPort)
	if c != nil {
		r.rule("-A %s -d %s/32 -p tcp --dport %d -j REJECT --reject-with tcp-reset", n.ChainGW, host, c.DNSPort)
		r.rule("-A %s -d %s/32 -p udp --dport %d -j REJECT --reject-with icmp-port-unreachable", n.ChainGW, host, c.DNSPort)
	}
	r.rule("-I INPUT 1 ! -i %s -j %s", n.HostVeth, n.ChainGW)
	r.rule("-I INPUT 1 -i %s -j %s", n.HostVeth, n.ChainIn)
	r.rule("-I FORWARD 1 -i %s -j %s", n.HostVeth, n.ChainFwd)
	r.rule("-I FORWARD 1 -o %s -j %s", n.HostVeth, n.ChainFwd)
	r.line("COMMIT")
	v4 = r.b.String()

	r = rules{comment: n.Comment}
	r.line("*filter")
	r.line(":" + n.ChainIn + " - [0:0]")
	r.rule("-A %s -j DROP", n.ChainIn)
	r.rule("-I INPUT 1 -i %s -j %s", n.HostVeth, n.ChainIn)
	r.rule("-I FORWARD 1 -i %s -j %s", n.HostVeth, n.ChainIn)
	r.rule("-I FORWARD 1 -o %s -j %s", n.HostVeth, n.ChainIn)
	r.line("COMMIT")
	return v4, r.b.String()
}
