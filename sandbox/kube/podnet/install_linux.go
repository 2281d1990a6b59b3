package podnet

import (
	"errors"
	"fmt"
	"os"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// TableName is the name of Install's tables, one IPv4 (family ip) and one
// IPv6 (family ip6).
const TableName = "sbx-pod"

// Codes of the ICMP errors the rules reject with: administratively
// prohibited (ICMP_PKT_FILTERED, ICMPV6_ADM_PROHIBITED).
const (
	icmpAdminProhibited   = 13
	icmpv6AdminProhibited = 1
)

// ipsDstNAT is IPS_DST_NAT of linux/netfilter/nf_conntrack_common.h: the
// connection's destination was rewritten (DNAT, REDIRECT).
const ipsDstNAT = 1 << 5

// ctDirReply is IP_CT_DIR_REPLY: a packet in a connection's reply
// direction.
const ctDirReply = 1

// Install installs the agent pod's rules, r, in the calling thread's
// network namespace, replacing Install's tables if they are there (so
// installing twice leaves one copy), in one transaction: either all of
// them are in place or none changed. It needs CAP_NET_ADMIN there.
//
// In the IPv4 table, a nat chain on the output hook (priority dstnat)
// leaves loopback and the shim's uid alone, sends port 53 (UDP and TCP),
// whatever its address, to the gateway's DNS port, leaves the gateway's
// address alone, and redirects every other TCP connection to the shim's
// port. A filter chain on the same hook at priority filter, after it, sees
// the packet as the nat chain left it; it accepts loopback, the
// redirected connections, the shim's uid to the capture port (and rejects
// its uid anything else), and everyone to the proxy and DNS ports; the
// rest is rejected with a TCP reset or an ICMP administratively-prohibited
// error. A filter chain on the input hook takes loopback and the replies
// to the pod's own connections (packets in the reply direction of a
// tracked connection, and the ICMP errors related to one), and drops the
// rest: nothing outside the pod can open a connection to it, whatever
// the cluster's NetworkPolicy enforcement. The IPv6 table's filters take
// loopback alone, rejecting what would leave and dropping what comes in.
// Both tables drop whatever would be forwarded. Base chains' policies
// drop, so a rule missing fails closed.
func Install(r Rules) error {
	if err := r.check(); err != nil {
		return err
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("installing the pod's nftables rules: %w", err)
	}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		// Adding a table that exists does nothing, so the delete that
		// follows cannot fail for a missing one.
		t := &nftables.Table{Family: fam, Name: TableName}
		c.AddTable(t)
		c.DelTable(t)
	}
	addRuleset(c, r)
	if err := c.Flush(); err != nil {
		if errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("installing the pod's nftables rules: %w; it needs CAP_NET_ADMIN in the pod's network namespace (the init container's only capability)", err)
		}
		return fmt.Errorf("installing the pod's nftables rules: %w", err)
	}
	return nil
}

// addRuleset adds r's tables, chains and rules to c's batch.
func addRuleset(c *nftables.Conn, r Rules) {
	gw := r.Gateway.Unmap().AsSlice()
	drop := nftables.ChainPolicyDrop

	t4 := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName})
	nat := c.AddChain(&nftables.Chain{Name: "nat-output", Table: t4, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	out4 := c.AddChain(&nftables.Chain{Name: "output", Table: t4, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	in4 := c.AddChain(&nftables.Chain{Name: "input", Table: t4, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	fwd4 := c.AddChain(&nftables.Chain{Name: "forward", Table: t4, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})

	t6 := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv6, Name: TableName})
	out6 := c.AddChain(&nftables.Chain{Name: "output", Table: t6, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	in6 := c.AddChain(&nftables.Chain{Name: "input", Table: t6, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	fwd6 := c.AddChain(&nftables.Chain{Name: "forward", Table: t6, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})

	add := func(ch *nftables.Chain, comment string, exprs ...[]expr.Any) {
		var all []expr.Any
		for _, e := range exprs {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: all,
			UserData: userdata.AppendString(nil, userdata.TypeComment, "sbx: "+comment)})
	}
	tcp, udp := byte(unix.IPPROTO_TCP), byte(unix.IPPROTO_UDP)

	// nat: where a new connection goes.
	add(nat, "loopback stays", oifname("lo"), verdict(expr.VerdictReturn))
	add(nat, "the shim's own connections are not captured", skuid(r.ShimUID), verdict(expr.VerdictReturn))
	add(nat, "DNS to anywhere goes to the gateway", proto(udp), dport(53), dnat(gw, r.DNSPort))
	add(nat, "DNS to anywhere goes to the gateway", proto(tcp), dport(53), dnat(gw, r.DNSPort))
	add(nat, "the gateway's own ports are filtered, not captured", daddr(gw), verdict(expr.VerdictReturn))
	add(nat, "other TCP goes to the capture shim", proto(tcp), redirect(r.ShimPort))

	// filter: whether a packet may leave, after nat.
	add(out4, "loopback", oifname("lo"), verdict(expr.VerdictAccept))
	// A redirected connection's packets keep the output interface of
	// their first route (not lo) for the whole hook; they are accepted
	// by where the nat chain sent them.
	add(out4, "connections redirected to the shim", daddr([]byte{127, 0, 0, 1}), proto(tcp), dport(r.ShimPort),
		ctStatus(ipsDstNAT), verdict(expr.VerdictAccept))
	add(out4, "the shim reaches the capture port", skuid(r.ShimUID), daddr(gw), proto(tcp), dport(r.CapturePort),
		verdict(expr.VerdictAccept))
	add(out4, "and nothing else", skuid(r.ShimUID), proto(tcp), rejectTCP())
	add(out4, "and nothing else", skuid(r.ShimUID), rejectICMP(icmpAdminProhibited))
	add(out4, "the gateway's proxy", daddr(gw), proto(tcp), dport(r.ProxyPort), verdict(expr.VerdictAccept))
	add(out4, "the gateway's DNS", daddr(gw), proto(tcp), dport(r.DNSPort), verdict(expr.VerdictAccept))
	add(out4, "the gateway's DNS", daddr(gw), proto(udp), dport(r.DNSPort), verdict(expr.VerdictAccept))
	add(out4, "the rest fails at once", proto(tcp), rejectTCP())
	add(out4, "the rest fails at once", rejectICMP(icmpAdminProhibited))
	// The pod's own packets leave in their connections' original
	// direction, accepted above; none leaves in the reply direction of a
	// connection opened from outside, since input lets none be opened.

	// input: what may come in. Redirected connections, port-forwards
	// (the kubelet's reach the pod on its loopback) and the rejections
	// above (sent to the pod itself) come in on lo.
	add(in4, "loopback", iifname("lo"), verdict(expr.VerdictAccept))
	add(in4, "replies to the pod's own connections", ctReply(), verdict(expr.VerdictAccept))
	add(in4, "nothing else comes in", verdict(expr.VerdictDrop))
	add(fwd4, "the pod forwards nothing", verdict(expr.VerdictDrop))

	add(out6, "loopback", oifname("lo"), verdict(expr.VerdictAccept))
	add(out6, "the rest fails at once", proto(tcp), rejectTCP())
	add(out6, "the rest fails at once", rejectICMP(icmpv6AdminProhibited))
	// Nothing but loopback leaves over IPv6: there are no replies to take.
	add(in6, "loopback", iifname("lo"), verdict(expr.VerdictAccept))
	add(in6, "nothing else comes in", verdict(expr.VerdictDrop))
	add(fwd6, "the pod forwards nothing", verdict(expr.VerdictDrop))
}

// The expressions below load into register 1 (and 2 for a port) and
// compare it, as nft does.

// oifname matches the output interface's name.
func oifname(name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

// iifname matches the input interface's name.
func iifname(name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

// skuid matches packets of sockets owned by uid.
func skuid(uid uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(uid)},
	}
}

// proto matches the transport protocol (IPPROTO_*).
func proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

// daddr matches the IPv4 destination address a (4 bytes).
func daddr(a []byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a},
	}
}

// dport matches the TCP or UDP destination port; it follows proto.
func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
	}
}

// ctStatus matches connections with any of the status bits.
func ctStatus(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATUS, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// ctReply matches a tracked connection's packets in its reply direction,
// and the ICMP errors about it coming that way (ct state
// established,related ct direction reply): on input, the replies to the
// pod's own connections.
func ctReply() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Ct{Key: expr.CtKeyDIRECTION, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{ctDirReply}},
	}
}

// dnat sends the connection to addr:port (IPv4).
func dnat(addr []byte, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: addr},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

// redirect sends the connection to port on the namespace's loopback
// (127.0.0.1, for the output hook).
func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

// rejectTCP answers with a TCP reset; it follows proto(tcp).
func rejectTCP() []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}
}

// rejectICMP answers with an ICMP (or ICMPv6, by the table's family)
// destination unreachable of the given code.
func rejectICMP(code uint8) []expr.Any {
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: code}}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }
