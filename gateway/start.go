package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Gateway is a running gateway made by Start. Close stops it.
type Gateway struct {
	Server *Server
	Log    *decisionlog.Log
	Ring   *decisionlog.Ring
	// ProxyAddr is the address the proxy listens on.
	ProxyAddr net.Addr
	// DNSAddr is the address of the DNS stub's UDP socket, whose port its
	// TCP listener has too; nil without Config.DNS.
	DNSAddr net.Addr
	// APIAddrs are the API's addresses, as "unix:PATH" or host:port.
	APIAddrs []string
	// Bypass is where the packets the sandbox's rules refused are
	// reported, to be logged as bypass records.
	Bypass *BypassLog

	fileSink *decisionlog.FileSink // the log's file (Config.LogFile), or nil
	journal  *mockllm.JournalFile  // the mocks' journal file (Config.MockJournal), or nil
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	sockets  []string
	errMu    sync.Mutex
	errs     []error
}

// Start opens the proxy listener, the DNS stub's sockets (Config.DNS),
// the decision log and the management API and serves them: it is the one
// place a Config becomes a running gateway. When ctx is
// done the listeners stop; Close ends the connections and closes the log,
// and must always be called. A failure undoes what Start had made.
func Start(ctx context.Context, o Config) (_ *Gateway, retErr error) {
	if o.Policy == nil {
		return nil, errors.New("gateway: Config.Policy is required")
	}
	if len(o.API) > 0 && o.TokenFile == "" {
		return nil, errors.New("gateway: Config.TokenFile is required with Config.API (a random token is written there when it is missing)")
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:3128"
	}
	ctx, cancel := context.WithCancel(ctx)
	g := &Gateway{cancel: cancel, Ring: decisionlog.NewRing(o.RingSize)}
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

	sinks := append([]decisionlog.Sink{g.Ring}, o.Sinks...)
	if o.LogFile != "" {
		fs, err := decisionlog.OpenFileSink(o.LogFile, o.LogLimits)
		if err != nil {
			return nil, err // it names the decision log and its path
		}
		sinks = append(sinks, fs)
		g.fileSink = fs
	}
	g.Log = decisionlog.NewLog(o.Sandbox, sinks...)
	closers = append(closers, g.Log.Close)

	store := netpolicy.NewStore(o.Policy)
	srv, err := newServer(serverConfig{Config: o, Store: store, Log: g.Log})
	if err != nil {
		return nil, err
	}
	g.Server, g.Bypass = srv, srv.bypass
	closers = append(closers, srv.Close)
	if o.MockJournal != "" {
		if g.journal, err = srv.mocks.openJournal(o.MockJournal, o.LogLimits.Append); err != nil {
			return nil, err
		}
		if g.journal != nil {
			closers = append(closers, g.journal.Close)
		}
	}

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
		if token, err = api.LoadOrCreateToken(o.TokenFile); err != nil {
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
		g.serve(func() error { return srv.dns.ServeUDP(ctx, dnsPC) })
		g.serve(func() error { return srv.serveListener(ctx, dnsLn, "DNS", 0, "", serveDNSConn(srv)) })
	}
	if len(apiLns) > 0 {
		as, err := api.NewServer(api.ServerConfig{Gateway: apiGateway{srv}, Sandbox: o.Sandbox, Token: token, Ring: g.Ring, ProxyAddrs: []string{ln.Addr().String()}})
		if err != nil {
			return nil, err
		}
		for _, aln := range apiLns {
			g.serve(func() error { return as.Serve(ctx, aln) })
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
	if g.journal != nil {
		errs = append(errs, g.journal.Close())
	}
	g.removeSockets()
	g.errMu.Lock()
	errs = append(errs, g.errs...)
	g.errMu.Unlock()
	return decisionlog.Combine(errs...)
}

// parseAddrPort returns a TCP listener's address.
func parseAddrPort(addr net.Addr) (ap netip.AddrPort, err error) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return ap, errors.New("not a TCP address")
	}
	return unmapAddrPort(tcp.AddrPort()), nil
}
