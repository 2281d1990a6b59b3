package gateway

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// The DNS stub of docs/capture.md. It answers from the policy alone and
// never sends a query anywhere: a name the policy could let through on
// some port gets a fake address, so that no name reaches a real resolver
// before a connection to it is decided, and DNS cannot carry data out.
const (
	// dnsTTL is the TTL of an answer, in seconds: short, so that a policy
	// change is seen soon. The fake address itself never changes.
	dnsTTL = 5
	// dnsMaxPlainUDP is the largest UDP response to a query without EDNS
	// (RFC 1035 §4.2.1).
	dnsMaxPlainUDP = 512
	// dnsMaxPayload is the largest UDP response to a query with EDNS,
	// whatever larger size the client offers, and the size the stub
	// offers in its own OPT record (the 2020 DNS flag day's 1232).
	dnsMaxPayload = 1232
	// dnsMaxQuery is the largest query the stub reads; a larger one is
	// answered FORMERR. Real queries are a few dozen bytes.
	dnsMaxQuery = 1232
	// dnsLogPort is the port written in the records of DNS queries: the
	// DNS port the sandbox asked, whatever port the stub listens on.
	dnsLogPort = 53
	// rcodeBadVers is the extended response code for an EDNS version the
	// stub does not speak (RFC 6891 §6.1.3).
	rcodeBadVers dnsmessage.RCode = 16
)

// ServeDNSUDP answers DNS queries that arrive on pc until ctx is done or
// Close is called, and then returns nil; it closes pc. What it answers,
// and what it logs, is said in the package documentation; a query from
// outside Config.Clients is dropped unanswered (and logged, rate-bounded,
// with kind decisionlog.KindConn). Several goroutines read pc at once: each ends when
// pc is closed, and ServeDNSUDP returns when all have.
func (s *Server) ServeDNSUDP(ctx context.Context, pc net.PacketConn) error {
	if ap, err := netip.ParseAddrPort(pc.LocalAddr().String()); err == nil {
		s.AddOwnAddr(ap)
	}
	workers := min(max(2*runtime.GOMAXPROCS(0), 4), 64)
	s.mu.Lock()
	if s.closed { // closed before it began serving: not an error
		s.mu.Unlock()
		pc.Close()
		return nil
	}
	s.packetConns[pc] = struct{}{}
	s.wg.Add(workers) // so that Close waits for their last records
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { pc.Close() })
	defer stop()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer wg.Done()
			s.readDNSUDP(ctx, pc)
		}()
	}
	wg.Wait()
	s.mu.Lock()
	delete(s.packetConns, pc)
	s.mu.Unlock()
	pc.Close()
	return nil
}

// readDNSUDP reads and answers queries on pc until pc is closed or ctx is
// done.
func (s *Server) readDNSUDP(ctx context.Context, pc net.PacketConn) {
	buf := make([]byte, dnsMaxQuery+1) // one more, to see a query too long
	out := make([]byte, 0, dnsMaxPayload)
	udp, _ := pc.(*net.UDPConn)
	var backoff time.Duration
	for {
		var (
			n    int
			from netip.AddrPort
			addr net.Addr
			err  error
		)
		if udp != nil {
			n, from, err = udp.ReadFromUDPAddrPort(buf)
		} else if n, addr, err = pc.ReadFrom(buf); err == nil {
			from, _ = netip.ParseAddrPort(addr.String())
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A passing failure, as in Serve: wait and go on.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logger.Warn("reading DNS queries", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		client := unmapAddrPort(from)
		if !s.isClient(client.Addr()) {
			s.logRefusal(&s.notClients, client.Addr(), client.String(), 0, notClientReason)
			continue
		}
		resp, ok := s.answerDNSUDP(buf[:n], client, out[:0])
		if !ok {
			continue
		}
		// A UDP send does not block for long; a lost answer is the
		// client's to retry, as with any UDP DNS server.
		if udp != nil {
			udp.WriteToUDPAddrPort(resp, from)
		} else {
			pc.WriteTo(resp, addr)
		}
	}
}

// dnsQueryHook, when not nil, is called with every UDP query before it
// is answered. It is nil in production; tests set it to make answering
// a query panic.
var dnsQueryHook func(msg []byte)

// answerDNSUDP is answerDNS for a query over UDP, which a worker reading
// the stub's socket answers: a panic while answering it ends that query
// alone, unanswered (the client asks again), as recoverConn does for a
// connection, and the worker goes on with the next.
func (s *Server) answerDNSUDP(msg []byte, client netip.AddrPort, out []byte) (resp []byte, ok bool) {
	defer s.recoverQuery(client)
	if dnsQueryHook != nil {
		dnsQueryHook(msg)
	}
	return s.answerDNS(msg, false, client, out)
}

// recoverQuery, deferred in answerDNSUDP, turns a panic while answering
// a UDP query from client into no answer: it logs the panic with its
// stack, counts it, and records it in a close record of kind dns with the
// error "gateway error: panic: ..." (the stack stays out of the decision
// log).
func (s *Server) recoverQuery(client netip.AddrPort) {
	p := recover()
	if p == nil {
		return
	}
	stack := debug.Stack()
	rec := &decisionlog.Record{
		Event: decisionlog.EventClose, ID: strconv.FormatUint(s.connID.Add(1), 36), Kind: decisionlog.KindDNS,
		Client: client.String(), Error: "gateway error: panic: " + truncate(fmt.Sprint(p), 200),
	}
	s.logger.Error("panic answering a DNS query over UDP: it goes unanswered, the gateway goes on", "client", rec.Client, "id", rec.ID, "panic", p, "stack", string(stack))
	s.metrics.panicked("dns_udp")
	s.emit(rec)
}

// ServeDNSTCP answers DNS queries over TCP connections accepted on ln
// (RFC 7766: every message after its length in two bytes; a connection
// may carry many queries, answered in order) until ctx is done or Close is
// called, and then returns nil; it closes ln. A connection waits at most
// Limits.DNSIdleTimeout for a query and Limits.HeaderReadTimeout for the
// rest of one once it has begun; it is closed after a message the stub
// does not answer. Clients outside Config.Clients, or over
// Limits.MaxConnsPerClient (which counts proxy and DNS connections
// together), are reset at once (see decisionlog.KindConn).
func (s *Server) ServeDNSTCP(ctx context.Context, ln net.Listener) error {
	return s.serveListener(ctx, ln, "DNS", 0, "", func(_ context.Context, c net.Conn) { s.serveDNSConn(c) })
}

// serveDNSConn answers the queries of one DNS-over-TCP client until it
// closes, idles out, sends what the stub does not answer, or Close closes
// the connection.
func (s *Server) serveDNSConn(c net.Conn) {
	var client netip.AddrPort
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		client = unmapAddrPort(ap)
	}
	br := bufio.NewReaderSize(c, 2+dnsMaxQuery)
	buf := make([]byte, dnsMaxQuery+1)
	out := make([]byte, 2, 2+dnsMaxPayload)
	var size [2]byte
	for {
		c.SetReadDeadline(time.Now().Add(s.limits.DNSIdleTimeout))
		if _, err := br.Peek(1); err != nil {
			return
		}
		c.SetReadDeadline(time.Now().Add(s.limits.HeaderReadTimeout))
		if _, err := io.ReadFull(br, size[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(size[:]))
		m := min(n, len(buf))
		if _, err := io.ReadFull(br, buf[:m]); err != nil {
			return
		}
		if _, err := br.Discard(n - m); err != nil { // past dnsMaxQuery: FORMERR
			return
		}
		resp, ok := s.answerDNS(buf[:m], true, client, out[:2])
		if !ok {
			return
		}
		binary.BigEndian.PutUint16(resp, uint16(len(resp)-2))
		c.SetWriteDeadline(time.Now().Add(s.limits.DNSIdleTimeout))
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// answerDNS answers one query, msg, from client, and logs it: it
// appends the response to out and returns it, or reports false when msg
// gets no answer (it is no query, or too short to answer). tcp says
// whether the response may be longer than a UDP one.
func (s *Server) answerDNS(msg []byte, tcp bool, client netip.AddrPort, out []byte) ([]byte, bool) {
	snap := s.cfg.Store.Load()
	rec := &decisionlog.Record{
		ID:            strconv.FormatUint(s.connID.Add(1), 36),
		Event:         decisionlog.EventDecision,
		Client:        client.String(),
		Kind:          decisionlog.KindDNS,
		Port:          dnsLogPort,
		PolicyVersion: snap.Version(),
		// What the stub does not decide by the policy it refuses.
		Action:   string(netpolicy.Block),
		Enforced: true,
		Rule:     netpolicy.RuleInvalid,
	}
	resp, ok := s.respondDNS(snap, msg, tcp, rec, out)
	if s.cfg.Owner != nil {
		// The query was sent to some resolver's address that the rules
		// redirected here, which the socket alone knows.
		network := "udp"
		if tcp {
			network = "tcp"
		}
		setProcess(rec, s.owner(network, client, netip.AddrPort{}))
	}
	s.metrics.request(decisionlog.KindDNS, netpolicy.Action(rec.Action))
	s.emit(rec)
	return resp, ok
}

// respondDNS is answerDNS without the logging: it fills in rec.
func (s *Server) respondDNS(snap *netpolicy.Snapshot, msg []byte, tcp bool, rec *decisionlog.Record, out []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil { // only a message shorter than a header fails here
		rec.Reason, rec.Error = fmt.Sprintf("malformed query: %d bytes, shorter than a DNS header", len(msg)), "not answered"
		return nil, false
	}
	if h.Response {
		rec.Reason, rec.Error = "not a query: the response bit is set", "not answered"
		return nil, false
	}
	r := dnsReply{
		header: dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired,
			RecursionAvailable: true, CheckingDisabled: h.CheckingDisabled},
		limit: dnsMaxPlainUDP,
		rec:   rec,
	}
	if tcp {
		r.limit = 2 + 65535 // out holds the length, which the caller writes
	}
	switch {
	case len(msg) > dnsMaxQuery:
		return r.send(out, dnsmessage.RCodeFormatError, fmt.Sprintf("malformed query: longer than %d bytes", dnsMaxQuery))
	case h.OpCode != 0:
		return r.send(out, dnsmessage.RCodeNotImplemented, fmt.Sprintf("opcode %d is not supported: the stub answers standard queries (opcode 0) only", h.OpCode))
	}
	q, err := p.Question()
	if err != nil {
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return r.send(out, dnsmessage.RCodeFormatError, "malformed query: no question")
		}
		return r.send(out, dnsmessage.RCodeFormatError, "malformed query: "+err.Error())
	}
	rec.Method = dnsTypeName(q.Type)
	raw := q.Name.String()
	host, hostErr := netpolicy.NormalizeHost(raw)
	if hostErr == nil {
		rec.Host = host
	} else {
		rec.Host = raw // at most 254 bytes; the log escapes what needs it
	}
	if _, err := p.Question(); !errors.Is(err, dnsmessage.ErrSectionDone) {
		return r.send(out, dnsmessage.RCodeFormatError, "malformed query: more than one question")
	}
	r.question = &q // echoed from here on
	if err := p.SkipAllAnswers(); err != nil {
		return r.send(out, dnsmessage.RCodeFormatError, "malformed query: "+err.Error())
	}
	if err := p.SkipAllAuthorities(); err != nil {
		return r.send(out, dnsmessage.RCodeFormatError, "malformed query: "+err.Error())
	}
	var ednsVersion uint8
	for {
		ah, err := p.AdditionalHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return r.send(out, dnsmessage.RCodeFormatError, "malformed query: "+err.Error())
		}
		if ah.Type == dnsmessage.TypeOPT {
			if r.edns {
				return r.send(out, dnsmessage.RCodeFormatError, "malformed query: more than one OPT record")
			}
			r.edns, ednsVersion = true, uint8(ah.TTL>>16)
			if !tcp { // RFC 6891 §6.2.5: below 512 counts as 512
				r.limit = min(max(int(ah.Class), dnsMaxPlainUDP), dnsMaxPayload)
			}
		}
		if err := p.SkipAdditional(); err != nil {
			return r.send(out, dnsmessage.RCodeFormatError, "malformed query: "+err.Error())
		}
	}
	if ednsVersion != 0 {
		return r.send(out, rcodeBadVers, fmt.Sprintf("EDNS version %d is not supported: the stub speaks version 0", ednsVersion))
	}
	if q.Class != dnsmessage.ClassINET {
		return r.send(out, dnsmessage.RCodeRefused, fmt.Sprintf("query class %d is refused: the stub answers class IN only", q.Class))
	}
	switch q.Type {
	case dnsmessage.TypeA, dnsmessage.TypeAAAA, dnsmessage.TypeHTTPS, dnsmessage.TypeSVCB:
	default:
		return r.send(out, dnsmessage.RCodeRefused, "query type "+rec.Method+" is refused: the stub answers A, and AAAA, HTTPS and SVCB with no records, nothing else")
	}

	// The name's verdict over every port. A name the policy blocks on
	// every port does not exist for the sandbox, whatever the type asked.
	name := host
	if hostErr != nil {
		name = raw // DecideHost blocks it as invalid, with the reason
	}
	d := snap.Policy().DecideHost(name)
	if sec := s.secrets.PlaceholderIn(raw); sec != nil {
		// A secret's placeholder in a name (docs/secrets.md): the name
		// does not exist, in every mode, and gets no fake address to
		// connect to; the attempt is logged by rule secret. (The stub
		// asks no resolver for any name, this one or another.)
		d, rec.Secret = sec.Block(rec.Host), sec.Name()
	} else if hostErr == nil && s.mock(host) != nil {
		// A mocked LLM host is answered by the gateway itself (docs/mock-llm.md)
		// : an agent that resolves it must reach the mock, whatever
		// the policy says of the real host.
		d = netpolicy.Decision{Action: netpolicy.Allow, Rule: RuleMockLLM, Reason: "mock LLM: the gateway answers " + host + " itself"}
	}
	rec.Action, rec.Rule, rec.Reason = string(d.Action), d.Rule, d.Reason
	rec.Enforced = enforced(snap, d)
	if d.Action == netpolicy.Block && rec.Enforced {
		return r.finish(out, dnsmessage.RCodeNameError)
	}
	if q.Type != dnsmessage.TypeA {
		return r.finish(out, dnsmessage.RCodeSuccess) // no IPv6, no service records: a fake A is the only way in
	}
	ip, err := s.fakeIPs.assign(host)
	if err != nil {
		rec.Error = err.Error()
		return r.finish(out, dnsmessage.RCodeServerFailure)
	}
	r.a = ip.As4()
	r.hasA = true
	return r.finish(out, dnsmessage.RCodeSuccess)
}

// dnsReply is the response being made to one query.
type dnsReply struct {
	header   dnsmessage.Header
	question *dnsmessage.Question // nil: none is echoed (FORMERR, NOTIMP)
	a        [4]byte
	hasA     bool
	edns     bool // the query had an OPT record; the response has one
	limit    int  // the largest response, in bytes of out
	rec      *decisionlog.Record
}

// send is finish for a query the stub refuses or cannot read: reason goes
// into the record, whose verdict stays block by rule invalid.
func (r *dnsReply) send(out []byte, rcode dnsmessage.RCode, reason string) ([]byte, bool) {
	r.rec.Reason = reason
	return r.finish(out, rcode)
}

// finish appends the response with rcode to out and notes rcode in the
// record. A response over the limit is sent truncated (TC) without its
// answer, which cannot happen with the stub's answers of at most about
// 300 bytes but keeps the bound whatever changes.
func (r *dnsReply) finish(out []byte, rcode dnsmessage.RCode) ([]byte, bool) {
	r.rec.Status = int(rcode)
	resp, err := r.build(out, rcode)
	if err == nil && len(resp) > r.limit {
		r.header.Truncated, r.hasA = true, false
		resp, err = r.build(out, rcode)
	}
	if err != nil { // cannot happen: every part came from a parsed query
		r.rec.Error = "building the response: " + err.Error()
		return nil, false
	}
	return resp, true
}

// build appends the response with rcode to out.
func (r *dnsReply) build(out []byte, rcode dnsmessage.RCode) ([]byte, error) {
	h := r.header
	h.RCode = rcode & 0xf // the rest goes into the OPT record (BADVERS comes only with one)
	b := dnsmessage.NewBuilder(out, h)
	b.EnableCompression() // the answer's name points at the question's
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if r.question != nil {
		if err := b.Question(*r.question); err != nil {
			return nil, err
		}
	}
	if r.hasA {
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		rh := dnsmessage.ResourceHeader{Name: r.question.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
		if err := b.AResource(rh, dnsmessage.AResource{A: r.a}); err != nil {
			return nil, err
		}
	}
	if r.edns {
		if err := b.StartAdditionals(); err != nil {
			return nil, err
		}
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(dnsMaxPayload, rcode, false)
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// dnsTypeName is the name of a query type as DNS tools write it, or
// TYPE<n> (RFC 3597) for a type it does not name.
func dnsTypeName(t dnsmessage.Type) string {
	switch t {
	case dnsmessage.TypeA:
		return "A"
	case dnsmessage.TypeNS:
		return "NS"
	case dnsmessage.TypeCNAME:
		return "CNAME"
	case dnsmessage.TypeSOA:
		return "SOA"
	case dnsmessage.TypePTR:
		return "PTR"
	case dnsmessage.TypeMX:
		return "MX"
	case dnsmessage.TypeTXT:
		return "TXT"
	case dnsmessage.TypeAAAA:
		return "AAAA"
	case dnsmessage.TypeSRV:
		return "SRV"
	case dnsmessage.TypeOPT:
		return "OPT"
	case dnsmessage.TypeSVCB:
		return "SVCB"
	case dnsmessage.TypeHTTPS:
		return "HTTPS"
	case dnsmessage.TypeWKS:
		return "WKS"
	case dnsmessage.TypeHINFO:
		return "HINFO"
	case dnsmessage.TypeMINFO:
		return "MINFO"
	case dnsmessage.TypeAXFR:
		return "AXFR"
	case dnsmessage.TypeALL:
		return "ANY"
	case 10:
		return "NULL"
	case 35:
		return "NAPTR"
	case 43:
		return "DS"
	case 46:
		return "RRSIG"
	case 47:
		return "NSEC"
	case 48:
		return "DNSKEY"
	case 251:
		return "IXFR"
	case 257:
		return "CAA"
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// listenDNS opens the DNS stub's UDP socket and TCP listener on the same
// addr, bound to the network interface iface when it is not "" (see
// Options.ListenInterface). With port 0 both get the same free port.
func listenDNS(ctx context.Context, addr, iface string) (net.PacketConn, net.Listener, error) {
	var lc net.ListenConfig
	if iface != "" {
		ctl, err := bindToDevice(iface)
		if err != nil {
			return nil, nil, err
		}
		lc.Control = ctl
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
