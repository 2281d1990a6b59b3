package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/dnsstub"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Limits bound what one client can make the gateway do (docs/gateway.md).
// A zero field takes the default named in its comment. IdleConnTimeout and
// ResponseTimeout are kept to within 1/16 of their length, never more (a
// kept client is cut off after 1 min 52.5 s to 2 min of silence): their
// deadlines are set again only when they went that stale. A tunnel (or
// an upgraded connection) silent both ways ends one to two
// IdleTunnelTimeouts after its last byte; one side silent while the other
// sends keeps it open. HeaderReadTimeout is one deadline on a whole head,
// whatever the client's pace: from the accept for a connection's first
// request (a captured connection's wait for its first bytes included),
// from the first byte of the next one on a kept connection, and, in a
// CONNECT tunnel, from the first byte of the ClientHello the gateway
// reads for its name.
type Limits struct {
	HeaderReadTimeout   time.Duration // reading a request's head: 10 s
	DialTimeout         time.Duration // connecting upstream: 10 s
	DNSTimeout          time.Duration // resolving a name: 5 s
	IdleTunnelTimeout   time.Duration // a tunnel with no byte either way: 10 min
	IdleConnTimeout     time.Duration // a keep-alive client between requests: 2 min
	MaxTunnelsPerClient int           // open tunnels per client IP, 429 beyond: 1024
	MaxConnsPerClient   int           // open connections per client IP, 429 beyond: 4096
	ResponseTimeout     time.Duration // waiting for an upstream's response head: 5 min
	MaxHeaderBytes      int           // request line and headers, 431 beyond: 64 KiB
	DNSIdleTimeout      time.Duration // a DNS-over-TCP client between queries, and writing an answer: 10 s
	// FirstBytesTimeout is how long a transparent connection waits for the
	// client's first bytes before it is decided by name and port alone, as
	// a protocol where the server speaks first: 250 ms.
	FirstBytesTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&l.HeaderReadTimeout, 10*time.Second)
	def(&l.DialTimeout, 10*time.Second)
	def(&l.DNSTimeout, 5*time.Second)
	def(&l.IdleTunnelTimeout, 10*time.Minute)
	def(&l.IdleConnTimeout, 2*time.Minute)
	def(&l.ResponseTimeout, 5*time.Minute)
	def(&l.DNSIdleTimeout, 10*time.Second)
	def(&l.FirstBytesTimeout, 250*time.Millisecond)
	if l.MaxTunnelsPerClient <= 0 {
		l.MaxTunnelsPerClient = 1024
	}
	if l.MaxConnsPerClient <= 0 {
		l.MaxConnsPerClient = 4096
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	return l
}

// Server is the gateway: an HTTP forward proxy and CONNECT tunnel that
// decides every request with the policy in its Store, refuses what the
// address guard refuses, dials exactly the address it checked and logs
// every decision. Start makes one from a Config; it is safe for
// concurrent use.
type Server struct {
	cfg      serverConfig
	inspect  inspectTransports // inspected requests go upstream through these
	secrets  *secrets.Set      // where a secret's value may go, and what bound hosts answer is scrubbed with
	limits   Limits
	logger   *slog.Logger
	resolver *Resolver
	pool     upstreamPool
	metrics  *Metrics
	pipe     pipeline // decides every request and tunnel (pipeline.go)

	// dns is the DNS stub (dns.go); fakeIPs are its names and their fake
	// addresses, which the transparent path reads.
	dns     *dnsstub.Stub
	fakeIPs *dnsstub.FakeIPs
	// approvals hold the requests whose verdict is ask on their
	// questions, and carry out the answers (ask.go).
	approvals *approval.Registry
	// mocks are the scripted LLMs that answer for the gateway (mock.go).
	mocks *mocks
	// bypass folds the reported packets into bypass records (bypass.go).
	bypass *BypassLog
	// out is where the records of refusals and bypasses go (refusal.go).
	out recordOut

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	tunnels   tunnelCount
	clients   map[netip.Addr]int // open connections per client IP
	closed    bool

	// base is cancelled by Close, ending every request still waiting on
	// an upstream.
	base       context.Context
	cancelBase context.CancelFunc

	// ownAddrs are the addresses the gateway serves on; read on every
	// request without a lock, replaced under mu.
	ownAddrs atomic.Pointer[[]netip.AddrPort]

	connID atomic.Uint64
	wg     sync.WaitGroup // one per connection goroutine

	// The fence (fence.go): Config.Clients and Config.Fence normalized,
	// and the host's addresses.
	clientNets atomic.Pointer[[]netip.Prefix] // replaced by SetClients
	fence      []netip.Prefix
	hostAddrs  hostAddrs

	// refusals bound the records of refused connections and tunnels, one
	// per cause (refusal.go).
	refusals refusals

	// ca is the CA inspected tunnels are served with: Config.CA, or the
	// one SetCA put in its place.
	ca atomic.Pointer[CA]
}

// newServer returns a Server for cfg. It listens on nothing until Serve.
func newServer(cfg serverConfig) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("gateway: serverConfig.Store is required")
	}
	clientNets, err := normalizePrefixes("Clients", cfg.Clients)
	if err != nil {
		return nil, err
	}
	fence, err := normalizePrefixes("Fence", cfg.Fence)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:       cfg,
		limits:    cfg.Limits.withDefaults(),
		logger:    cfg.Logger,
		resolver:  cfg.Resolver,
		fakeIPs:   dnsstub.NewFakeIPs(dnsstub.MaxFakeIPs),
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
		clients:   map[netip.Addr]int{},
		metrics:   newMetrics(),
	}
	s.pipe.s = s
	s.clientNets.Store(&clientNets)
	s.ca.Store(cfg.CA)
	s.fence = fence
	s.out = recordOut{ids: &s.connID, log: cfg.Log, metrics: s.metrics}
	s.refusals.init(&s.out)
	var owner func(network string, client, remote netip.AddrPort) Process
	if cfg.Owner != nil {
		owner = s.owner
	}
	s.bypass = newBypassLog(cfg.Store, &s.out, owner, cfg.ProcessUnknown)
	if s.approvals, err = approval.New(approval.Config{Store: cfg.Store, Gateway: approvalGateway{s}, File: cfg.ApprovalsFile, Max: cfg.MaxApprovals}); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if s.mocks, err = newMocks(cfg.Config, &s.limits, &s.out, s.pipe.finishRefusal); err != nil {
		return nil, err
	}
	// The current policy, and every later one, may name only these.
	if err := cfg.Store.AddCheck(s.mocks.checkLLMScripts); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	all := cfg.Secrets
	for _, l := range cfg.Logins {
		all = append(slices.Clip(all), l.Secrets()...)
	}
	if s.secrets, err = secrets.NewSet(all, cfg.Store); err != nil {
		return nil, fmt.Errorf("gateway: Config.Secrets %w", err)
	}
	for _, l := range cfg.Logins {
		l.Bind(s.secrets)
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.resolver == nil {
		s.resolver = &Resolver{}
	}
	if s.cfg.Dial == nil {
		d := &net.Dialer{Timeout: s.limits.DialTimeout}
		s.cfg.Dial = d.DialContext
	}
	if s.dns, err = newDNSStub(s); err != nil {
		return nil, err
	}
	s.hostAddrs.list = interfaceAddrs
	s.hostAddrs.logger = func(err error) { s.logger.Warn("address guard", "err", err) }
	if cfg.Log != nil {
		// Every change to the store is recorded before a request can be
		// decided under it.
		cfg.Store.OnChange(func(next *netpolicy.Snapshot) {
			cfg.Log.Emit(&decisionlog.Record{Event: decisionlog.EventPolicy, PolicyVersion: next.Version(), Change: next.Change()})
		})
		cfg.Log.ReportFileFaults(s.reportLogFaults)
	}
	return s, nil
}

// Metrics returns the server's counters, for the management API.
func (s *Server) Metrics() *Metrics { return s.metrics }

// FakeIPs returns the DNS stub's table of names and fake addresses, which
// lives as long as the server.
func (s *Server) FakeIPs() *dnsstub.FakeIPs { return s.fakeIPs }

// Store returns the policy store the server decides with.
func (s *Server) Store() *netpolicy.Store { return s.cfg.Store }

// AddOwnAddr records an address the gateway serves on besides its proxy
// listeners (the management API's), which the guard refuses always.
func (s *Server) AddOwnAddr(ap netip.AddrPort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var addrs []netip.AddrPort
	if old := s.ownAddrs.Load(); old != nil {
		addrs = append(addrs, *old...)
	}
	addrs = append(addrs, unmapAddrPort(ap))
	s.ownAddrs.Store(&addrs)
}

// Serve accepts proxy clients on ln until ctx is done or Close is called,
// and then returns nil; other accept errors are returned. It closes ln.
// A client outside Config.Clients, or over Limits.MaxConnsPerClient, is
// refused as soon as it is accepted (see decisionlog.KindConn).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.serveListener(ctx, ln, "proxy", http.StatusTooManyRequests, "sbx: too many connections from this client\n", s.serveConn)
}

// serveListener accepts the clients of a service (what: "proxy", "DNS")
// on ln, as Serve says, and serves each with handle in a goroutine of its
// own. A client over Limits.MaxConnsPerClient is answered with overCap
// and body before it is closed, or reset when overCap is 0.
func (s *Server) serveListener(ctx context.Context, ln net.Listener, what string, overCap int, body string, handle func(context.Context, net.Conn)) error {
	if ap, err := netip.ParseAddrPort(ln.Addr().String()); err == nil {
		s.AddOwnAddr(ap)
	}
	s.mu.Lock()
	if s.closed {
		// Closed before it began serving: as Close after, not an error.
		s.mu.Unlock()
		ln.Close()
		return nil
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	// Requests end when ctx is done or Close is called.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopBase := context.AfterFunc(s.base, cancel)
	defer stopBase()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors, or another passing failure: wait
			// and go on, as net/http does; a client must not be able to
			// stop the service by exhausting descriptors.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logger.Warn("accepting "+what+" clients", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		if !s.isClient(clientAddr(c)) {
			s.refusals.notClients.refuseConn(c, 0, "", notClientReason)
			continue
		}
		switch s.track(c) {
		case trackClosed:
			c.Close()
			return nil
		case trackTooMany:
			s.refusals.overCap.refuseConn(c, overCap, body, func(ip netip.Addr) string {
				return fmt.Sprintf("client %s has %d connections open, the limit per client", ip, s.limits.MaxConnsPerClient)
			})
			continue
		}
		// The goroutine ends when the client's connection is done: it
		// closes, errs, idles out, or Close closes it; or when serving
		// it panics, which ends that connection alone (recoverConn).
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			f := &connFault{}
			defer s.recoverConn(what, c, f)
			if connHook != nil {
				connHook(c)
			}
			handle(context.WithValue(ctx, connFaultKey{}, f), c)
		}()
	}
}

// connHook, when not nil, is called with every client connection a
// listener accepts (proxy, transparent, DNS over TCP) in the goroutine
// that serves it, before it is served. It is nil in production; tests set
// it to make serving a connection panic.
var connHook func(net.Conn)

// connFaultKey carries a connection's *connFault in the context that
// serves it.
type connFaultKey struct{}

// connFault is what recoverConn knows of the connection it recovers: its
// conn, once serveConn made it (nil for DNS over TCP, and for a
// transparent connection).
type connFault struct{ c *conn }

// recoverConn, deferred in the goroutine that serves the client
// connection nc of a service (what: "proxy", "DNS", "transparent"), turns
// a panic there into the end of that connection alone: it logs the panic
// with its stack on the gateway's logger, records it in a close record of
// the connection with the error "gateway error: panic: ..." (the stack
// stays out of the decision log), and closes nc. The record takes the id
// and kind of the connection's last request when it made one, so that it
// joins that request's records; else a new id, and the kind of the
// service.
func (s *Server) recoverConn(what string, nc net.Conn, f *connFault) {
	p := recover()
	if p == nil {
		return
	}
	nc.Close()
	stack := debug.Stack()
	rec := &decisionlog.Record{Event: decisionlog.EventClose, Error: "gateway error: panic: " + truncate(fmt.Sprint(p), 200)}
	if c := f.c; c != nil {
		rec.Client = c.clientText
		setProcess(rec, c.proc)
		c.lastMu.Lock()
		rec.ID, rec.Kind = c.lastID, c.lastKind
		c.lastMu.Unlock()
	} else if ap, err := netip.ParseAddrPort(nc.RemoteAddr().String()); err == nil {
		rec.Client = unmapAddrPort(ap).String()
	}
	if rec.ID == "" {
		rec.ID = strconv.FormatUint(s.connID.Add(1), 36)
		switch what {
		case "DNS":
			rec.Kind = decisionlog.KindDNS
		case "transparent":
			rec.Kind = decisionlog.KindTransparent
		default:
			rec.Kind = decisionlog.KindHTTP
		}
	}
	s.logger.Error("panic serving a "+what+" client: its connection is closed, the gateway goes on", "client", rec.Client, "id", rec.ID, "panic", p, "stack", string(stack))
	s.metrics.panicked(strings.ToLower(what))
	s.emit(rec)
}

// trackResult says whether a new connection may be served.
type trackResult int

const (
	trackOK trackResult = iota
	trackClosed
	trackTooMany
)

// clientAddr is the IP of a connection's peer, unmapped.
func clientAddr(c net.Conn) netip.Addr { return remoteAddrPort(c).Addr() }

// remoteAddrPort is the address of a connection's peer, unmapped, or the
// zero AddrPort when it has none. A TCP peer's is read from its
// *net.TCPAddr, not formatted and parsed back: a connection is accepted,
// counted and given back by it, and that was six strings for each.
func remoteAddrPort(c net.Conn) netip.AddrPort {
	return addrPortOf(c.RemoteAddr())
}

// addrPortOf is the address and port of a, unmapped, or the zero
// AddrPort when a is not an IP address.
func addrPortOf(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ap := ta.AddrPort(); ap.Addr().IsValid() {
			return unmapAddrPort(ap)
		}
		return netip.AddrPort{}
	}
	if a == nil {
		return netip.AddrPort{}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return unmapAddrPort(ap)
	}
	return netip.AddrPort{}
}

// track registers a client connection, counting it against its client's
// cap, and adds one to wg for its goroutine, all under the lock that Close
// takes, so Close never misses one.
func (s *Server) track(c net.Conn) trackResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return trackClosed
	}
	ip := clientAddr(c)
	if s.clients[ip] >= s.limits.MaxConnsPerClient {
		return trackTooMany
	}
	s.clients[ip]++
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return trackOK
}

// untrack closes and forgets a client connection.
func (s *Server) untrack(c net.Conn) {
	c.Close()
	ip := clientAddr(c)
	s.mu.Lock()
	delete(s.conns, c)
	if s.clients[ip]--; s.clients[ip] <= 0 {
		delete(s.clients, ip)
	}
	s.mu.Unlock()
}

// trackUpstream registers a tunnel's upstream connection so Close closes
// it; it reports false once the server is closed.
func (s *Server) trackUpstream(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrackUpstream(c net.Conn) {
	c.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Close ends every pending question with a deny by approval.ByClosed, logged as
// its answer (so the requests held on it are blocked, and a question's
// timer logs nothing after), stops every listener and DNS socket, closes
// every client connection and tunnel, waits for their goroutines (whose close records
// reach the log), closes idle upstream connections and writes the bypass
// and refused-connection records still folded. It does not close
// the Log; its owner does, after Close.
func (s *Server) Close() error {
	// Every pending question ends first, its answer (by closed) logged
	// while the decision log is open, and no timer left to log later.
	s.approvals.Close()
	s.mu.Lock()
	s.closed = true
	s.cancelBase()
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.dns.Close()
	s.wg.Wait()
	s.pool.close()
	s.inspect.closeIdle()
	s.bypass.flush(true)
	s.refusals.flush()
	return nil
}

// Process is a sandboxed process, as Config.Owner finds it, or why none
// is named.
type Process struct {
	PID  int
	Comm string // the name of what it executes (sandbox.Process.Comm): never a title it gave itself
	Exe  string // its executable's path as the sandbox sees it; "" when unknown
	// Unknown, when PID is 0, says why no process is named: a short
	// sentence, the records' process_unknown.
	Unknown string
}

// conn is one client connection with its buffered reader.
type conn struct {
	net.Conn
	br         *bufio.Reader // nil once released
	client     netip.AddrPort
	clientText string  // client as ip:port, for the records
	proc       Process // the process that owns the client's socket, if known

	// The deadlines set last through conn's own methods, which the
	// keep-alive loop and deadlineWriter compare with what they need
	// (staleDeadline). A deadline set on the net.Conn underneath is not
	// seen here; code that does so (tunnels, TLS inspection) ends the
	// connection, or sets a deadline no later than its idle ahead.
	readDL, writeDL time.Time

	fwd *forwardState // nil until a request is forwarded; see forward

	// answered, when not nil, is the allow a question about the
	// connection as a tunnel got (its CONNECT, or a late captured
	// connection decided by target and port), before its plain HTTP was
	// decided request by request: a request whose verdict is an ask by
	// the same rule takes it (pipeline.hold).
	answered *netpolicy.Decision

	// heads holds the request head being served, read over the last
	// one's memory.
	heads headBuf

	// The id and kind of the connection's last request record, for the
	// record of a panic (recoverConn); the requests of an inspected
	// HTTP/2 tunnel are recorded at once.
	lastMu           sync.Mutex
	lastID, lastKind string
}

// SetReadDeadline sets the connection's read deadline and remembers it.
func (c *conn) SetReadDeadline(t time.Time) error {
	c.readDL = t
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline sets the connection's write deadline and remembers it.
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.writeDL = t
	return c.Conn.SetWriteDeadline(t)
}

// extendWriteDeadline sets the write deadline idle ahead, unless the one
// set last is still fresh (staleDeadline).
func (c *conn) extendWriteDeadline(idle time.Duration) {
	if now := time.Now(); staleDeadline(c.writeDL, now, idle) {
		c.SetWriteDeadline(now.Add(idle))
	}
}

// SetDeadline sets both deadlines and remembers them.
func (c *conn) SetDeadline(t time.Time) error {
	c.readDL, c.writeDL = t, t
	return c.Conn.SetDeadline(t)
}

// newConn wraps an accepted connection, whose client socket's peer address
// (as the client sees it) is remote, and finds the process that owns it.
func (s *Server) newConn(nc net.Conn, remote netip.AddrPort) *conn {
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(nc)
	c := &conn{Conn: nc, br: br, client: remoteAddrPort(nc)}
	c.clientText = c.client.String()
	c.proc = s.owner("tcp", c.client, remote)
	return c
}

// owner returns the process that owns a client's socket (network, client
// and remote as for Config.Owner), or why it names none: Config.Owner's
// answer, or, without an Owner, Config.ProcessUnknown.
func (s *Server) owner(network string, client, remote netip.AddrPort) Process {
	if s.cfg.Owner == nil {
		return Process{Unknown: s.cfg.ProcessUnknown}
	}
	p := s.cfg.Owner(network, client, remote)
	if p.PID != 0 {
		p.Unknown = ""
	}
	return p
}

// setProcess copies p into rec: the process, or why none is named.
func setProcess(rec *decisionlog.Record, p Process) {
	rec.PID, rec.Comm, rec.Exe, rec.ProcessUnknown = p.PID, p.Comm, p.Exe, p.Unknown
}

// readerPool holds the clients' read buffers: 16 KiB each, so that a
// connection that no longer needs one (an idle tunnel) gives it back.
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

// releaseReader returns c's read buffer to the pool; nothing may read
// c.br after. Code that hands the buffer to a reader that may outlive it
// (net/http, in inspectTunnel) takes it instead: c.br = nil.
func (c *conn) releaseReader() {
	if c.br != nil {
		c.br.Reset(nil)
		readerPool.Put(c.br)
		c.br = nil
	}
}

// awaitByte waits for c's client's next byte, within the read deadline
// set, and returns the read's error when none came. While it waits, c
// holds no read buffer (an idle tunnel holds none: relay); once a byte
// came, c.br holds it, from a pooled buffer, before the rest of the
// connection.
func (c *conn) awaitByte() error {
	if c.br != nil && c.br.Buffered() > 0 {
		return nil
	}
	c.releaseReader()
	var b [1]byte
	n, err := c.Conn.Read(b[:])
	c.br = readerPool.Get().(*bufio.Reader)
	c.br.Reset(io.MultiReader(bytes.NewReader(b[:n]), c.Conn))
	if n == 0 {
		return cmp.Or(err, io.ErrNoProgress)
	}
	c.br.Peek(1) // the byte, buffered: the bytes.Reader's first read gives it alone, without waiting
	return nil
}

// serveConn reads requests from one client until it closes or a request
// ends the connection.
func (s *Server) serveConn(ctx context.Context, nc net.Conn) {
	accepted := time.Now()
	var local netip.AddrPort
	if s.cfg.Owner != nil {
		local = addrPortOf(nc.LocalAddr())
	}
	c := s.newConn(nc, local)
	if f, ok := ctx.Value(connFaultKey{}).(*connFault); ok {
		f.c = c
	}
	defer c.releaseReader()
	defer s.endForward(c)
	// The first request's whole head must come within HeaderReadTimeout
	// of the accept, whatever the client's pace: the deadline is set once
	// and never moved while the head is read.
	c.SetReadDeadline(accepted.Add(s.limits.HeaderReadTimeout))
	for first := true; ; first = false {
		// Between requests the client may idle; once the next request's
		// first byte is here, its whole head must come within
		// HeaderReadTimeout of that byte. The idle deadline is set again
		// only when it went stale, and the head's only when reading the
		// head may wait for the client.
		if now := time.Now(); !first && staleDeadline(c.readDL, now, s.limits.IdleConnTimeout) {
			c.SetReadDeadline(now.Add(s.limits.IdleConnTimeout))
		}
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		waits := !headBuffered(c.br)
		if waits && !first {
			c.SetReadDeadline(time.Now().Add(s.limits.HeaderReadTimeout))
		}
		head, err := c.heads.read(c.br, s.limits.MaxHeaderBytes)
		if err != nil {
			s.refuseMalformed(c, err)
			return
		}
		// What reads the client from here sets its own deadlines (a
		// request body, a WebSocket relay), or has none (a tunnel); the
		// idle deadline may stay in place for a plain request.
		if waits || head.Method == http.MethodConnect {
			c.SetReadDeadline(time.Time{})
		}
		if head.Method == http.MethodConnect {
			// The tunnel may last for hours: the upstream connection an
			// earlier request left held goes where other clients find it.
			if c.fwd != nil {
				s.pool.release(&c.fwd.up)
			}
			s.serveConnect(ctx, c, head)
			return
		}
		if !s.serveHTTP(ctx, c, head) {
			return
		}
	}
}

// headBuffered reports whether br holds a whole request head, so that
// readRequestHead cannot wait for the client: after the empty lines it
// skips, a line ending followed by an empty line.
func headBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	for {
		switch {
		case bytes.HasPrefix(b, []byte("\r\n")):
			b = b[2:]
			continue
		case bytes.HasPrefix(b, []byte("\n")):
			b = b[1:]
			continue
		}
		break
	}
	return bytes.Contains(b, []byte("\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// refuseMalformed answers a request the parser refused, and logs it.
func (s *Server) refuseMalformed(c *conn, err error) {
	var se *statusError
	if !errors.As(err, &se) {
		return // EOF, timeout or reset: nobody to answer
	}
	kind := decisionlog.KindHTTP
	if se.Method == http.MethodConnect {
		kind = decisionlog.KindConnect
	}
	rec := s.newRecord(c, kind, se.Method, 0)
	rec.Action, rec.Rule, rec.Reason = string(netpolicy.Block), netpolicy.RuleInvalid, "malformed request: "+se.Reason
	rec.Enforced, rec.Status = true, se.Status
	s.emit(rec)
	s.metrics.request(kind, netpolicy.Block)
	writeSimple(c, se.Status, "", se.Reason+"\n", true, nil)
}

// newRecord starts a decision record for a request of c.
func (s *Server) newRecord(c *conn, kind, method string, port uint16) *decisionlog.Record {
	rec := new(decisionlog.Record)
	s.initRecord(rec, c, kind, method, port)
	return rec
}

// initRecord makes rec a new decision record for a request of c, all its
// other fields zero.
func (s *Server) initRecord(rec *decisionlog.Record, c *conn, kind, method string, port uint16) {
	id := strconv.FormatUint(s.connID.Add(1), 36)
	c.lastMu.Lock()
	c.lastID, c.lastKind = id, kind
	c.lastMu.Unlock()
	*rec = decisionlog.Record{
		ID:     id,
		Event:  decisionlog.EventDecision,
		Client: c.clientText,
		Kind:   kind,
		Method: truncate(method, netpolicy.MaxMethodLen), // a longer one is refused (ValidMethod), and logged cut
		Port:   int(port),
		PID:    c.proc.PID,
		Comm:   c.proc.Comm,
		Exe:    c.proc.Exe,

		ProcessUnknown: c.proc.Unknown,
	}
}

// emit writes rec to the decision log, if there is one.
func (s *Server) emit(rec *decisionlog.Record) {
	if s.cfg.Log != nil {
		s.cfg.Log.Emit(rec)
	}
}

// post writes rec, a record whose seq nothing needs, to the decision
// log, if there is one, without waiting for a commit under way
// (Log.Post).
func (s *Server) post(rec *decisionlog.Record) {
	if s.cfg.Log != nil {
		s.cfg.Log.Post(rec)
	}
}

// commit writes rec, the record of a decision that lets a request be
// carried out, to the decision log, if there is one, and returns nil once
// the log's file holds it (Log.Commit): else the request must not go on.
func (s *Server) commit(rec *decisionlog.Record) error {
	if s.cfg.Log == nil {
		return nil
	}
	_, err := s.cfg.Log.Commit(rec)
	return err
}

// reportLogFaults says on the gateway's logger, at once, when the
// decision log's file cannot be written and when it can again.
func (s *Server) reportLogFaults(err error) {
	if err != nil {
		s.logger.Error(err.Error())
		return
	}
	s.logger.Warn("the decision log is written again: requests are decided by the policy again")
}

// enforced reports whether a verdict is enforced: everything but a block
// by a rule or the default in audit mode. Guard, invalid and secret
// verdicts are enforced in every mode.
func enforced(snap *netpolicy.Snapshot, d netpolicy.Decision) bool {
	if d.Action != netpolicy.Block || snap.Policy().Mode() != netpolicy.Audit {
		return true
	}
	return d.Rule == netpolicy.RuleGuard || d.Rule == netpolicy.RuleInvalid || d.Rule == secrets.Rule
}

func unmapAddrPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// countingWriter counts what passes through to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}
