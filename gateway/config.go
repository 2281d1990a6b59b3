package gateway

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net"
	"net/netip"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/login"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
)

// Config is a gateway's whole configuration, the one its callers fill
// (sbx gateway; sbx run through sandbox/run): where it listens, where its
// decision log goes, and how it serves. Start turns it into a running
// gateway. Policy is required; every other zero field has the default or
// the meaning its comment names.
//
// To add an option: add a field here, with a comment saying what it does
// and what its zero value means, and use it: in Start for what is opened
// before serving, or through the Server's s.cfg for how requests are
// served (nothing copies the fields one by one). Then fill it where it is
// wanted: cmd/sbx's gatewayFlags.config for a flag that sbx gateway and
// sbx run share, sandbox/run's gatewayConfig for what a sandbox implies;
// cmd/sbx's TestGatewayConfigSameFromSameFlags fails until the field is set by
// both commands or listed there as one-sided, with the reason.
type Config struct {
	// Where it listens.

	// Listen is the proxy's host:port; "" means 127.0.0.1:3128.
	Listen string
	// ListenInterface, when set, binds the proxy's listener and the DNS
	// stub's sockets to that network interface (SO_BINDTODEVICE; in sbx
	// run the sandbox's host-side veth, sbxh<id>): the kernel resets a
	// connection that arrives through any other interface. A process on
	// the host is not stopped by it (Linux delivers a local connection as
	// if through the interface holding the address): Clients is. Linux
	// only: elsewhere Start fails with an error wrapping
	// errors.ErrUnsupported. "" binds to no interface.
	ListenInterface string
	// Clients, when not empty, are the only networks whose clients the
	// proxy serves (in sbx run, the sandbox's own address as a /32): a
	// connection from any other address is closed at once, before a byte
	// is read or written, with a TCP reset, and logged as a decision with
	// kind decisionlog.KindConn, action block, rule guard and the reason
	// "client <ip> is not this gateway's sandbox" (rate-bounded: see
	// decisionlog.KindConn). Empty serves every client that can connect.
	Clients []netip.Prefix
	// DNS, when set, is the host:port of the DNS stub (docs/capture.md),
	// served over UDP and TCP on the same port (port 0: a free one, the
	// same for both); see gateway/dnsstub. Its sockets are bound to
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
	// API lists the management API's addresses: "unix:/path/api.sock" or
	// a TCP host:port. None means no API.
	API []string
	// TokenFile holds the API's bearer token; it is created with a random
	// token when missing. Required when API is set.
	TokenFile string

	// What it decides with.

	// Policy is the starting policy. Required.
	Policy *netpolicy.Policy
	// Resolver turns names into addresses; nil uses a Resolver with no
	// static answers over the system resolver.
	Resolver *Resolver
	// Fence lists networks the gateway never dials, whatever allow_private
	// or an IP or CIDR allow rule says (in sbx run, the sandbox subnet
	// pool, so that a sandbox reaches no other sandbox and no gateway):
	// the guard refuses them with "address guard: <ip> is in the sandbox
	// pool". Whatever Fence says, the guard refuses always the gateway's
	// own listening addresses and this host's own addresses (those of
	// every interface, read again at most once a second), but loopback,
	// which allow_private governs as before: "address guard: <ip> is this
	// host's own address". Nil fences nothing more.
	Fence []netip.Prefix
	// Limits bound what one client can make the gateway do; a zero field
	// takes the default Limits names.
	Limits Limits
	// ApprovalsFile is the YAML policy file that an answer of scope
	// always writes its rule to (approval.AddApprovedRule): in sbx run,
	// --approvals FILE, else a YAML --policy file. "" refuses always
	// answers with approval.ErrNoFile. How long a request whose verdict is
	// ask is held is the policy's (ask_timeout, --ask-timeout). A caller
	// that pins the file (approval.PinFile) before anything
	// untrusted runs, as sbx run does, has it written through what was
	// resolved then.
	ApprovalsFile string

	// Where its decisions go.

	// LogFile, when set, receives the decision log as JSON Lines. It must
	// not exist or be a regular file of the effective uid with one link;
	// see OpenFileSink. "" writes no file.
	LogFile string
	// LogLimits bound what is written to LogFile; the zero value means
	// the defaults of FileSinkOptions (1000 records a second, bursts of
	// 20 000, 512 MiB, a new or empty file).
	LogLimits decisionlog.FileSinkOptions
	// Sinks receive the decision log besides LogFile and the API's ring;
	// nil adds none.
	Sinks []decisionlog.Sink
	// RingSize is how many recent records the API serves; 0 means 10 000.
	RingSize int
	// Sandbox is the sandbox id, written in every record and named in the
	// help of 403 answers and in /v1/status; "" standalone.
	Sandbox string
	// AllowCommand, when set, is the command the help of a 403 answer
	// gives to allow what was blocked, the target following it: "sbx
	// kube policy allow --sandbox ID" in sbx kube's gateway pod. "" gives
	// sbx policy allow, with --sandbox Sandbox (or --api ADDR --token-file
	// FILE for a standalone gateway).
	AllowCommand string
	// Owner, when set, names the sandboxed process that owns the client's
	// socket of a connection or packet: network is "tcp" or "udp" (for a
	// bypass record, the packet's Proto, which may be another), client
	// the socket's own address and remote its peer's as the client sees
	// it (the invalid AddrPort when not known). When it cannot tell for
	// certain it returns PID 0, and in Unknown why not. What it returns
	// goes into the records' pid, comm and exe, or process_unknown. It is
	// called once per connection, DNS query and bypass record, and must
	// be safe for concurrent use. Nil leaves the records' pid, comm and
	// exe out.
	Owner func(network string, client, remote netip.AddrPort) Process
	// ProcessUnknown, when set and Owner is nil, is why no process can be
	// named for the clients: the records of requests, tunnels, captured
	// connections, DNS queries and bypassing packets carry it as
	// process_unknown (sbx kube's gateway pod, which cannot see the agent
	// pod's processes).
	ProcessUnknown string
	// Logger receives operational messages; nil discards them.
	Logger *slog.Logger

	// What it inspects, mocks and records.

	// CA, when set, lets the gateway terminate TLS for the hosts the
	// policy inspects (netpolicy's Inspects: rules with inspect, methods,
	// path or intercept; docs/inspection.md), with certificates it mints for
	// them; the clients must trust CA.CertPEM. Nil inspects nothing: every
	// CONNECT is a spliced tunnel, decided as a whole.
	CA *CA
	// UpstreamRoots verify the upstreams of inspected requests; nil means
	// the host's system roots.
	UpstreamRoots *x509.CertPool
	// MockLLM maps hosts to the scripted LLMs that answer for them
	// (docs/mock-llm.md): every request to such a host, on any port, is
	// answered by its Responder and never dialed, whatever the policy
	// says, and logged as an intercept by rule RuleMockLLM. Keys are host
	// names or IP literals; Start normalizes them (netpolicy.NormalizeHost)
	// and refuses one that does not normalize. HTTPS to a mocked host
	// needs CA: the mock implies inspection, and without a CA a CONNECT
	// to it is refused rather than tunnelled to the real API. Nil or
	// empty mocks nothing.
	MockLLM map[string]*mockllm.Responder
	// LLMScripts maps the names of the policy's LLM responses
	// (netpolicy.Response.LLM) to the scripted LLMs that answer them: a
	// request an intercept rule with response {llm: NAME} decides is
	// answered by LLMScripts[NAME] and logged as an intercept by that
	// rule. The map is fixed when Start takes it: Start refuses a policy
	// naming a script it does not hold, and so does every later change
	// to the policy, so that a policy sent over the management API can
	// name only scripts loaded at start and never makes the gateway read
	// a file. Nil or empty holds none.
	LLMScripts map[string]*mockllm.Responder
	// MockJournal, when set and there are mocks (MockLLM, LLMScripts),
	// receives their journals as JSON Lines (mockllm.JournalFile), each
	// request as it arrives, so that what the agent sent outlives the
	// gateway: request bodies are kept there and in memory, never in the
	// decision log. Start opens it as it opens LogFile, and with
	// LogLimits.Append as LogFile's (decisionlog.OpenFile), and sets each
	// mock's Responder.Journal. "" writes none.
	MockJournal string
	// RecordLLM maps hosts to recorders (docs/mock-llm.md, --record-llm):
	// their HTTPS is inspected (it needs CA), decided by the policy as any
	// inspected host's, and what goes through is recorded as a script
	// that MockLLM replays; the caller writes the script. Keys are host
	// names as for MockLLM. Nil or empty records nothing.
	RecordLLM map[string]*mockllm.Recorder

	// Secrets are values the sandbox holds only as placeholders
	// (docs/secrets.md; make them with secrets.New or secrets.Read): in one
	// credential header field of an HTTPS request to one of a secret's
	// hosts that the policy and the address guard allowed, within the
	// secret's methods and paths, the gateway puts the value in place of
	// the placeholder; a placeholder anywhere else is blocked by rule
	// secrets.Rule. A secret's hosts are inspected (HTTPS needs CA).
	// The values stay in the gateway's memory: no record, answer or log
	// holds them. Nil or empty keeps none.
	Secrets []*secrets.Secret

	// Logins are agents' logins kept outside the sandbox (docs/login.md;
	// make them with login.Read): their access tokens are Secrets as any
	// (put in by the same rules), their token endpoints' hosts are
	// inspected (HTTPS needs CA), and a refresh the sandbox asks for
	// there with its placeholder is performed by the gateway
	// (login.Login.Refresher). Nil or empty keeps none.
	Logins []*login.Login
}

// serverConfig is what newServer makes a Server of: the caller's Config,
// of which it uses the fields for serving (not those Start opens:
// Listen, ListenInterface, DNS, Transparent, OriginalDst, API, TokenFile,
// LogFile, LogLimits, MockJournal, Sinks, RingSize; and not Policy, which Store
// holds), and what Start makes of the rest. Tests make one directly.
type serverConfig struct {
	Config
	// Store holds the running policy; changes apply to the next request.
	// Required.
	Store *netpolicy.Store
	// Log receives the decision records, and a policy record for every
	// change of Store before a request is decided under it; nil discards
	// them.
	Log *decisionlog.Log
	// Dial connects to an upstream address that has passed the guard;
	// nil uses a net.Dialer with Limits.DialTimeout. Tests replace it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxApprovals bounds the requests held for answers at once; 0 is
	// approval.MaxPending. Tests lower it.
	MaxApprovals int
}
