package gateway

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Options configure a gateway started with Start: the proxy, its decision
// log and its management API. Policy is required; every other zero field
// has the default its comment names.
type Options struct {
	// Listen is the proxy's host:port; "" means 127.0.0.1:3128.
	Listen string
	// DNS, when set, is the host:port of the DNS stub (docs/capture.md),
	// served over UDP and TCP on the same port (port 0: a free one, the
	// same for both); see Server.ServeDNSUDP. Its sockets are bound to
	// ListenInterface and serve Clients only, as the proxy's. "" means no
	// DNS stub.
	DNS string
	// Transparent, when set, is a listener for the TCP connections the
	// sandbox's rules redirect (docs/capture.md; see ServeTransparent),
	// opened by the caller in the sandbox's network namespace. Start
	// serves it and Close closes it. OriginalDst tells where each
	// connection was going; nil means OriginalDst (Linux).
	Transparent net.Listener
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Owner names the sandboxed process that owns a client's socket; see
	// Config.Owner. nil leaves the records' pid, comm and exe out.
	Owner func(network string, client, remote netip.AddrPort) (Process, bool)
	// API lists the management API's addresses: "unix:/path/api.sock" or
	// a TCP host:port. None means no API.
	API []string
	// TokenFile holds the API's bearer token; it is created with a random
	// token when missing. Required when API is set.
	TokenFile string
	// Policy is the starting policy. Required.
	Policy *netpolicy.Policy
	// Resolver resolves names; nil uses the system resolver only.
	Resolver *Resolver
	// LogFile, when set, receives the decision log as JSON Lines. It must
	// not exist or be a regular file of the effective uid with one link;
	// see OpenFileSink.
	LogFile string
	// LogLimits bound what is written to LogFile; the zero value means
	// the defaults of FileSinkOptions (1000 records a second, bursts of
	// 20 000, 512 MiB).
	LogLimits FileSinkOptions
	// Sinks receive the decision log besides LogFile and the API's ring.
	Sinks []Sink
	// RingSize is how many recent records the API serves; 0 means 10 000.
	RingSize int
	// Sandbox is the sandbox id written in every record; "" standalone.
	Sandbox string
	// Logger receives operational messages; nil discards them.
	Logger *slog.Logger
	// Limits bound clients; see Limits.
	Limits Limits

	// The fence: who may use the proxy, and what it never dials.
	//
	// ListenInterface, when set, binds the proxy's listener to that
	// network interface (SO_BINDTODEVICE; in sbx run the sandbox's
	// host-side veth, sbxh<id>): the kernel resets a connection that
	// arrives through any other interface. A process on the host is not
	// stopped by it (Linux delivers a local connection as if through the
	// interface holding the address): Clients is. Linux only: elsewhere
	// Start fails with an error wrapping errors.ErrUnsupported. "" binds
	// to no interface.
	ListenInterface string
	// Clients, when not empty, are the only client networks served (in
	// sbx run, the sandbox's address as a /32); see Config.Clients.
	Clients []netip.Prefix
	// Fence lists networks never dialed, whatever the policy says (in sbx
	// run, the subnet pool); see Config.Fence.
	Fence []netip.Prefix
	// CA and UpstreamRoots are Config's: TLS inspection of the hosts the
	// policy inspects, with certificates from CA, upstreams verified
	// against UpstreamRoots (nil: the host's roots). A nil CA inspects
	// nothing.
	CA            *CA
	UpstreamRoots *x509.CertPool
	// MockLLM is Config's: the hosts whose LLM API a script answers
	// (docs/mock-llm.md); HTTPS to them needs CA.
	MockLLM map[string]*mockllm.Responder
	// LLMScripts is Config's: the scripted LLMs the policy's intercept
	// rules with response {llm: NAME} answer with, by NAME.
	LLMScripts map[string]*mockllm.Responder
	// RecordLLM is Config's.
	RecordLLM map[string]*mockllm.Recorder
}

// Gateway is a running gateway made by Start. Close stops it.
type Gateway struct {
	Server *Server
	Log    *Log
	Ring   *Ring
	// ProxyAddr is the address the proxy listens on.
	ProxyAddr net.Addr
	// DNSAddr is the address of the DNS stub's UDP socket, whose port its
	// TCP listener has too; nil without Options.DNS.
	DNSAddr net.Addr
	// APIAddrs are the API's addresses, as "unix:PATH" or host:port.
	APIAddrs []string

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	sockets []string
	errMu   sync.Mutex
	errs    []error
}

// Start opens the proxy listener, the DNS stub's sockets (Options.DNS),
// the decision log and the management API and serves them. When ctx is
// done the listeners stop; Close ends the connections and closes the log,
// and must always be called. A failure undoes what Start had made.
func Start(ctx context.Context, o Options) (_ *Gateway, retErr error) {
	if o.Policy == nil {
		return nil, errors.New("gateway: Options.Policy is required")
	}
	if len(o.API) > 0 && o.TokenFile == "" {
		return nil, errors.New("the management API needs a token file: add --token-file FILE (a random token is written there when it is missing)")
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:3128"
	}
	ctx, cancel := context.WithCancel(ctx)
	g := &Gateway{cancel: cancel, Ring: NewRing(o.RingSize)}
	var closers []func() error
	defer func() {
		if retErr != nil {
			cancel()
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
			g.removeSockets()
		}
	}()
	if o.Transparent != nil {
		closers = append(closers, o.Transparent.Close) // Start owns it from here
	}

	sinks := append([]Sink{g.Ring}, o.Sinks...)
	if o.LogFile != "" {
		fs, err := OpenFileSink(o.LogFile, o.LogLimits)
		if err != nil {
			return nil, err // it names the decision log and its path
		}
		sinks = append(sinks, fs)
	}
	g.Log = NewLog(o.Sandbox, sinks...)
	closers = append(closers, g.Log.Close)

	store := netpolicy.NewStore(o.Policy)
	srv, err := New(Config{Store: store, Resolver: o.Resolver, Log: g.Log, Logger: o.Logger, Sandbox: o.Sandbox, Limits: o.Limits,
		Clients: o.Clients, Fence: o.Fence, Owner: o.Owner, CA: o.CA, UpstreamRoots: o.UpstreamRoots, MockLLM: o.MockLLM, LLMScripts: o.LLMScripts, RecordLLM: o.RecordLLM})
	if err != nil {
		return nil, err
	}
	g.Server = srv
	closers = append(closers, srv.Close)

	ln, err := listenProxy(ctx, o.Listen, o.ListenInterface)
	if err != nil {
		return nil, fmt.Errorf("listening for proxy clients on %s: %w", o.Listen, err)
	}
	closers = append(closers, ln.Close)
	g.ProxyAddr = ln.Addr()

	var dnsPC net.PacketConn
	var dnsLn net.Listener
	if o.DNS != "" {
		if dnsPC, dnsLn, err = listenDNS(ctx, o.DNS, o.ListenInterface); err != nil {
			return nil, fmt.Errorf("listening for DNS queries on %s: %w", o.DNS, err)
		}
		closers = append(closers, dnsPC.Close, dnsLn.Close)
		g.DNSAddr = dnsPC.LocalAddr()
		// The guard refuses the stub's port from the start.
		if ap, err := netip.ParseAddrPort(dnsPC.LocalAddr().String()); err == nil {
			srv.AddOwnAddr(ap)
		}
	}

	var apiLns []net.Listener
	var token string
	if len(o.API) > 0 {
		if token, err = LoadOrCreateToken(o.TokenFile); err != nil {
			return nil, err
		}
	}
	for _, addr := range o.API {
		aln, name, err := g.listenAPI(addr)
		if err != nil {
			return nil, err
		}
		closers = append(closers, aln.Close)
		apiLns = append(apiLns, aln)
		g.APIAddrs = append(g.APIAddrs, name)
	}
	// The API never listens where the proxy's clients are (docs/api.md):
	// not on every address, and not on the proxy's own address unless
	// that is loopback, where the clients are local processes anyway. Its
	// addresses are the gateway's own before the proxy serves.
	proxyAP, _ := parseAddrPort(ln.Addr())
	for _, aln := range apiLns {
		apiAP, err := parseAddrPort(aln.Addr())
		if err != nil {
			continue // a unix socket
		}
		if apiAP.Addr().IsUnspecified() || apiAP.Addr() == proxyAP.Addr() && !apiAP.Addr().IsLoopback() {
			return nil, fmt.Errorf("the management API on %s would be reachable where the proxy's clients are (%s); give it another address, such as unix:/run/sbx/api.sock or 127.0.0.1:PORT", apiAP, proxyAP)
		}
		srv.AddOwnAddr(apiAP)
	}

	snap := store.Load()
	g.Log.Emit(&decisionlog.Record{Event: decisionlog.EventPolicy, PolicyVersion: snap.Version(), Change: snap.Change()})
	g.serve(func() error { return srv.Serve(ctx, ln) })
	if o.Transparent != nil {
		origDst := o.OriginalDst
		if origDst == nil {
			origDst = OriginalDst
		}
		g.serve(func() error { return srv.ServeTransparent(ctx, o.Transparent, origDst) })
	}
	if dnsPC != nil {
		g.serve(func() error { return srv.ServeDNSUDP(ctx, dnsPC) })
		g.serve(func() error { return srv.ServeDNSTCP(ctx, dnsLn) })
	}
	if len(apiLns) > 0 {
		api, err := NewAPI(APIConfig{Server: srv, Token: token, Ring: g.Ring, ProxyAddrs: []string{ln.Addr().String()}})
		if err != nil {
			return nil, err
		}
		for _, aln := range apiLns {
			g.serve(func() error { return api.Serve(ctx, aln) })
		}
	}
	return g, nil
}

// serve runs fn in a goroutine that ends when fn returns (when the
// gateway's context is cancelled), keeping its error for Close.
func (g *Gateway) serve(fn func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := fn(); err != nil {
			g.errMu.Lock()
			g.errs = append(g.errs, err)
			g.errMu.Unlock()
		}
	}()
}

// listenAPI listens on "unix:PATH" (mode 0600, in a directory of mode
// 0700 that it creates when missing; a stale socket is replaced) or a TCP
// address.
func (g *Gateway) listenAPI(addr string) (net.Listener, string, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, "", fmt.Errorf("listening for the management API on %s: %w", addr, err)
		}
		return ln, ln.Addr().String(), nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, "", fmt.Errorf("management API socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, "", fmt.Errorf("management API socket %s: a file that is not a socket is there; choose another path", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, "", fmt.Errorf("management API socket %s is in use by another gateway", path)
		}
		os.Remove(path) // a stale socket from a crashed run
	}
	// Bound in a fresh private directory (0700), narrowed to 0600 and only
	// then moved into place, so that nobody else can connect to it in
	// between, whatever the umask and the directory's mode.
	tmpDir, err := os.MkdirTemp(filepath.Dir(path), ".sbx-api-")
	if err != nil {
		return nil, "", fmt.Errorf("management API socket: %w", err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, "", fmt.Errorf("listening for the management API on %s: %w", path, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // removeSockets does it
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, "", fmt.Errorf("management API socket: %w", err)
	}
	g.sockets = append(g.sockets, path)
	return ln, "unix:" + path, nil
}

func (g *Gateway) removeSockets() {
	for _, p := range g.sockets {
		os.Remove(p)
	}
}

// Close stops the proxy and the API, ends every connection and tunnel
// (their close records are logged), then flushes and closes the decision
// log. It returns the errors of all of these.
func (g *Gateway) Close() error {
	g.cancel()
	errs := []error{g.Server.Close()}
	g.wg.Wait()
	errs = append(errs, g.Log.Close())
	g.removeSockets()
	g.errMu.Lock()
	errs = append(errs, g.errs...)
	g.errMu.Unlock()
	return errors.Join(errs...)
}
