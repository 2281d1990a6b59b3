// Package dnsstub is the gateway's DNS stub (docs/capture.md). It answers
// the sandbox's DNS queries from the policy alone and never sends a query
// anywhere: a name the policy could let through on some port gets a fake
// address, so that no name reaches a real resolver before a connection to
// it is decided, and DNS cannot carry data out. What it answers, and what
// it logs, is said in the gateway's package documentation.
//
// The stub owns the reading and answering of queries, over UDP (its
// sockets, read by a few workers) and over one TCP connection at a time,
// the record of each query, and the table of fake addresses (FakeIPs),
// which the gateway reads back when a connection to one of them comes. It
// does not own the TCP listener (the gateway's, which counts DNS
// connections against a client's cap with its proxy connections), which
// clients may ask, the secrets and mocks that decide some names before the
// policy, the decision log or the metrics: the gateway it serves in hands
// it those as a Gateway.
package dnsstub

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// Gateway is what the stub uses of the gateway it serves in. The gateway
// implements it; its methods must be safe for concurrent use.
type Gateway interface {
	// NewID returns the id of a new record: the gateway numbers every
	// record it writes from one counter.
	NewID() string
	// IsClient reports whether a query from ip may be read.
	IsClient(ip netip.Addr) bool
	// RefuseQuery records, rate-bounded, a UDP query from a client that
	// IsClient refuses; the stub drops it unread and unanswered.
	RefuseQuery(client netip.AddrPort)
	// ServesOn tells the gateway an address the stub serves on, which
	// its address guard refuses always.
	ServesOn(ap netip.AddrPort)
	// Override decides a name before the policy does: raw is the name as
	// asked, host its normalized form ("" when it has none). ok false
	// leaves the name to the policy. Its verdicts are enforced in every
	// mode; secret, when not "", is the name of the secret whose
	// placeholder the name holds, for the record.
	Override(raw, host string) (d netpolicy.Decision, secret string, ok bool)
	// Decided writes rec, the complete record of a query over network
	// ("udp" or "tcp") from client: with the process that owns the
	// client's socket, when the gateway can tell, counted in its metrics,
	// to its decision log.
	Decided(rec *decisionlog.Record, network string, client netip.AddrPort)
	// Panicked counts a panic while a UDP query was answered and writes
	// rec, its close record, to the decision log.
	Panicked(rec *decisionlog.Record)
}

// Config is a Stub's configuration.
type Config struct {
	// Store holds the policy the stub answers by. Required.
	Store *netpolicy.Store
	// Gateway is the gateway the stub serves in. Required.
	Gateway Gateway
	// Names is the table of fake addresses the stub gives out; nil makes
	// one of MaxFakeIPs names.
	Names *FakeIPs
	// Logger receives operational messages (a failed read, a panic); nil
	// discards them.
	Logger *slog.Logger
	// IdleTimeout is how long a TCP connection waits for a query, and for
	// its answer to be written: 10 s when 0.
	IdleTimeout time.Duration
	// ReadTimeout is how long the rest of a query over TCP may take once
	// it has begun: 10 s when 0.
	ReadTimeout time.Duration
}

// Stub is a DNS stub: New makes one, ServeUDP and ServeConn serve it, and
// Close stops it. It is safe for concurrent use.
type Stub struct {
	store  *netpolicy.Store
	gw     Gateway
	names  *FakeIPs
	logger *slog.Logger
	idle   time.Duration
	read   time.Duration

	mu      sync.Mutex
	closed  bool
	sockets map[net.PacketConn]struct{} // the UDP sockets being served
	wg      sync.WaitGroup              // one per worker reading a socket
}

// New returns a stub for cfg; it serves nothing until ServeUDP or
// ServeConn.
func New(cfg Config) (*Stub, error) {
	if cfg.Store == nil || cfg.Gateway == nil {
		return nil, errors.New("dnsstub: Config.Store and Config.Gateway are required")
	}
	s := &Stub{store: cfg.Store, gw: cfg.Gateway, names: cfg.Names, logger: cfg.Logger,
		idle: cfg.IdleTimeout, read: cfg.ReadTimeout, sockets: map[net.PacketConn]struct{}{}}
	if s.names == nil {
		s.names = NewFakeIPs(MaxFakeIPs)
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.idle <= 0 {
		s.idle = 10 * time.Second
	}
	if s.read <= 0 {
		s.read = 10 * time.Second
	}
	return s, nil
}

// FakeIPs returns the stub's table of names and fake addresses.
func (s *Stub) FakeIPs() *FakeIPs { return s.names }

// Close stops every UDP socket being served and waits until their
// workers have written their last records; a later ServeUDP closes its
// socket at once. A TCP connection is its caller's to close.
func (s *Stub) Close() {
	s.mu.Lock()
	s.closed = true
	for pc := range s.sockets {
		pc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// ServeUDP answers DNS queries that arrive on pc until ctx is done or
// Close is called, and then returns nil; it closes pc. A query from a
// client the Gateway refuses is dropped unanswered (Gateway.RefuseQuery).
// Several goroutines read pc at once: each ends when pc is closed, and
// ServeUDP returns when all have.
func (s *Stub) ServeUDP(ctx context.Context, pc net.PacketConn) error {
	if ap, err := netip.ParseAddrPort(pc.LocalAddr().String()); err == nil {
		s.gw.ServesOn(ap)
	}
	workers := min(max(2*runtime.GOMAXPROCS(0), 4), 64)
	s.mu.Lock()
	if s.closed { // closed before it began serving: not an error
		s.mu.Unlock()
		pc.Close()
		return nil
	}
	s.sockets[pc] = struct{}{}
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
			s.readUDP(ctx, pc)
		}()
	}
	wg.Wait()
	s.mu.Lock()
	delete(s.sockets, pc)
	s.mu.Unlock()
	pc.Close()
	return nil
}

// readUDP reads and answers queries on pc until pc is closed or ctx is
// done.
func (s *Stub) readUDP(ctx context.Context, pc net.PacketConn) {
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
			// A passing failure, as in the gateway's accept loops: wait
			// and go on.
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
		if !s.gw.IsClient(client.Addr()) {
			s.gw.RefuseQuery(client)
			continue
		}
		resp, ok := s.answerUDP(buf[:n], client, out[:0])
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

// queryHook, when not nil, is called with every UDP query before it is
// answered. It is nil in production; tests set it to make answering a
// query panic.
var queryHook func(msg []byte)

// answerUDP is answer for a query over UDP, which a worker reading the
// stub's socket answers: a panic while answering it ends that query
// alone, unanswered (the client asks again), as the gateway's recovery
// does for a connection, and the worker goes on with the next.
func (s *Stub) answerUDP(msg []byte, client netip.AddrPort, out []byte) (resp []byte, ok bool) {
	defer s.recoverQuery(client)
	if queryHook != nil {
		queryHook(msg)
	}
	return s.answer(msg, false, client, out)
}

// recoverQuery, deferred in answerUDP, turns a panic while answering a
// UDP query from client into no answer: it logs the panic with its
// stack, and hands Gateway.Panicked a close record of kind dns with the
// error "gateway error: panic: ..." (the stack stays out of the decision
// log).
func (s *Stub) recoverQuery(client netip.AddrPort) {
	p := recover()
	if p == nil {
		return
	}
	stack := debug.Stack()
	rec := &decisionlog.Record{
		Event: decisionlog.EventClose, ID: s.gw.NewID(), Kind: decisionlog.KindDNS,
		Client: client.String(), Error: "gateway error: panic: " + truncate(fmt.Sprint(p), 200),
	}
	s.logger.Error("panic answering a DNS query over UDP: it goes unanswered, the gateway goes on", "client", rec.Client, "id", rec.ID, "panic", p, "stack", string(stack))
	s.gw.Panicked(rec)
}

// ServeConn answers the queries of one DNS-over-TCP client (RFC 7766:
// every message after its length in two bytes; a connection may carry
// many queries, answered in order) until it closes, idles out
// (Config.IdleTimeout; Config.ReadTimeout for the rest of a query once
// it has begun), sends what the stub does not answer, or its caller
// closes c. It does not close c.
func (s *Stub) ServeConn(c net.Conn) {
	var client netip.AddrPort
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		client = unmapAddrPort(ap)
	}
	br := bufio.NewReaderSize(c, 2+dnsMaxQuery)
	buf := make([]byte, dnsMaxQuery+1)
	out := make([]byte, 2, 2+dnsMaxPayload)
	var size [2]byte
	for {
		c.SetReadDeadline(time.Now().Add(s.idle))
		if _, err := br.Peek(1); err != nil {
			return
		}
		c.SetReadDeadline(time.Now().Add(s.read))
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
		resp, ok := s.answer(buf[:m], true, client, out[:2])
		if !ok {
			return
		}
		binary.BigEndian.PutUint16(resp, uint16(len(resp)-2))
		c.SetWriteDeadline(time.Now().Add(s.idle))
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// answer answers one query, msg, from client, and logs it: it appends
// the response to out and returns it, or reports false when msg gets no
// answer (it is no query, or too short to answer). tcp says whether the
// response may be longer than a UDP one.
func (s *Stub) answer(msg []byte, tcp bool, client netip.AddrPort, out []byte) ([]byte, bool) {
	snap := s.store.Load()
	rec := &decisionlog.Record{
		ID:            s.gw.NewID(),
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
	resp, ok := s.respond(snap, msg, tcp, rec, out)
	// The query was sent to some resolver's address that the rules
	// redirected here, which the socket alone knows.
	network := "udp"
	if tcp {
		network = "tcp"
	}
	s.gw.Decided(rec, network, client)
	return resp, ok
}

// respond is answer without the logging: it fills in rec.
func (s *Stub) respond(snap *netpolicy.Snapshot, msg []byte, tcp bool, rec *decisionlog.Record, out []byte) ([]byte, bool) {
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
	rec.Enforced = enforced(snap, d)
	normalized := host
	if hostErr != nil {
		normalized = ""
	}
	// A name with a secret's placeholder, or a mocked host: the
	// gateway's verdict, enforced in every mode. (The stub asks no
	// resolver for any name, these or another.)
	if od, secret, ok := s.gw.Override(raw, normalized); ok {
		d, rec.Secret, rec.Enforced = od, secret, true
	}
	rec.Action, rec.Rule, rec.Reason = string(d.Action), d.Rule, d.Reason
	if d.Action == netpolicy.Block && rec.Enforced {
		return r.finish(out, dnsmessage.RCodeNameError)
	}
	if q.Type != dnsmessage.TypeA {
		return r.finish(out, dnsmessage.RCodeSuccess) // no IPv6, no service records: a fake A is the only way in
	}
	ip, err := s.names.Assign(host)
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

// build appends the response with rcode to out. The header and the
// question are dnsmessage's; the answer and the OPT record are appended
// here, byte for byte as dnsmessage's Builder with compression would
// write them (TestBuildAsDNSMessage): the answer's name a pointer to the
// question's, which starts right after the header (RFC 1035 §4.1.4).
// Compression's table, a map and a string for each of the name's labels,
// was half of what answering a query allocated.
func (r *dnsReply) build(out []byte, rcode dnsmessage.RCode) ([]byte, error) {
	h := r.header
	h.RCode = rcode & 0xf // the rest goes into the OPT record (BADVERS comes only with one)
	start := len(out)
	b := dnsmessage.NewBuilder(out, h)
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if r.question != nil {
		if err := b.Question(*r.question); err != nil {
			return nil, err
		}
	}
	msg, err := b.Finish()
	if err != nil {
		return nil, err
	}
	if r.hasA {
		if r.question == nil {
			return nil, errors.New("an answer without a question")
		}
		if n := r.question.Name; n.Length == 1 && n.Data[0] == '.' {
			msg = append(msg, 0) // the root, which is never compressed
		} else {
			msg = append(msg, 0xc0|byte(dnsHeaderLen>>8), byte(dnsHeaderLen)) // a pointer to the question's name
		}
		msg = binary.BigEndian.AppendUint16(msg, uint16(dnsmessage.TypeA))
		msg = binary.BigEndian.AppendUint16(msg, uint16(dnsmessage.ClassINET))
		msg = binary.BigEndian.AppendUint32(msg, dnsTTL)
		msg = binary.BigEndian.AppendUint16(msg, uint16(len(r.a)))
		msg = append(msg, r.a[:]...)
		binary.BigEndian.PutUint16(msg[start+6:], 1) // ANCOUNT
	}
	if r.edns {
		// RFC 6891 §6.1.2: the root's name, the payload size as the
		// class, the extended rcode's high bits atop the TTL, which also
		// holds version 0 and no flags; no options.
		msg = append(msg, 0)
		msg = binary.BigEndian.AppendUint16(msg, uint16(dnsmessage.TypeOPT))
		msg = binary.BigEndian.AppendUint16(msg, dnsMaxPayload)
		msg = binary.BigEndian.AppendUint32(msg, uint32(rcode)>>4<<24)
		msg = binary.BigEndian.AppendUint16(msg, 0)
		binary.BigEndian.PutUint16(msg[start+10:], 1) // ARCOUNT
	}
	return msg, nil
}

// dnsHeaderLen is the length of a DNS message's header, where its
// question begins.
const dnsHeaderLen = 12

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

// enforced reports whether a verdict of the policy is enforced:
// everything but a block by a rule or the default in audit mode. Guard
// and invalid verdicts are enforced in every mode.
func enforced(snap *netpolicy.Snapshot, d netpolicy.Decision) bool {
	if d.Action != netpolicy.Block || snap.Policy().Mode() != netpolicy.Audit {
		return true
	}
	return d.Rule == netpolicy.RuleGuard || d.Rule == netpolicy.RuleInvalid
}

// truncate returns s cut to n bytes, with "..." when it was longer.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func unmapAddrPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
