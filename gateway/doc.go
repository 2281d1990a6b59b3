// Package gateway is sbx's way out of a sandbox: an HTTP/1.1 forward proxy
// and CONNECT tunnel that decides every request with a netpolicy.Store,
// refuses what the address guard refuses, dials exactly the address it
// checked, and logs every decision (docs/gateway.md and docs/decision-log.md).
//
// Every request and tunnel, whichever door it comes in by (a request to
// the proxy or a captured connection's plain HTTP request, a request
// inside an inspected tunnel, a CONNECT tunnel, a captured connection
// decided as a tunnel), is parsed by its door (strict framing: ambiguous
// requests are refused, not guessed at) and decided by one pipeline
// (pipeline.go), whose steps are, in order:
//
//	decide → secrets → inspect → mock → hold → refuse → cap → guard → commit → upstream
//
// decide normalizes the target and decides it (a placeholder in the host
// is a block); secrets refuses a placeholder where its value is not sent;
// inspect opens a tunnel the gateway inspects, whose requests come back
// through the pipeline one by one; mock hands a mocked host's request to
// the mock LLM; hold waits for an ask's answer; refuse answers an
// intercept and refuses an enforced block; cap counts a tunnel against its
// client's limit; guard resolves (static answers first, then the system
// resolver, always as a fully qualified name) and guards every resolved
// address; commit puts the decision record in the log's file before
// anything goes upstream; upstream lets the door dial the first address
// that passed, never a name, and relay, the close record logged at the
// end. A CONNECT's first bytes are checked for a TLS server name that
// differs from the CONNECT host.
//
// Plain HTTP is relayed without net/http on the request's path, which runs
// for every request (upstream.go): the request goes upstream on a pooled
// connection to the guarded address, its head written as http.Request.Write
// wrote it (upstreamreq.go), and the answer's head is read by a parser as
// strict as the request's (response.go: ambiguous framing is a 502) and
// written to the client with the gateway's own framing. A client
// connection keeps its per-request state (forwardState) and its deadlines,
// which are set again only when they went stale by more than 1/16 of their
// timeout.
//
// A sandbox's gateway serves that sandbox alone: its listener is bound to
// the sandbox's veth (Config.ListenInterface) and a connection from any
// other address is closed unanswered (Config.Clients; sbx kube's gateway
// pod is told its agent pod's address later, Server.SetClients). Whatever the policy
// says, it never dials its own addresses, this host's interface addresses
// (loopback aside, which the guard handles) or the Fence networks (sbx run
// gives its subnet pool and the default one).
//
// The transparent path (Server.ServeTransparent; Config.Transparent for
// Start) serves the TCP connections a sandbox's rules redirect instead of
// letting them out (docs/capture.md): OriginalDst says where each was
// going, the name behind a fake address (or the IP dialed) is decided
// after the client's first bytes are peeked, and an allowed connection is
// dialed and relayed as a CONNECT tunnel or, for plain HTTP, served
// request by request as the proxy serves. BypassLog.ReportPacket turns the
// packets the rules refused into bypass records, folded per target and
// second (docs/capture.md); Config.Owner names the process behind each record.
//
// TLS inspection (Config.CA; docs/inspection.md): for a host the policy
// inspects (netpolicy's Inspects), a CONNECT or a transparent TLS
// connection is opened when some request through it could pass
// (DecideTunnel), its TLS is terminated with a certificate the sandbox's
// CA mints for the host, and each HTTP/1.1 or HTTP/2 request in it is
// decided with its method and path (kind https), answered by an intercept
// or a 403, or sent on over the gateway's own TLS connection to the guarded
// address, verified against Config.UpstreamRoots. Every other host's
// tunnel is spliced and never decrypted.
//
// The decision log is package decisionlog (its Log, Record, FileSink and
// Ring), the contract of docs/decision-log.md: one decision record per
// request or tunnel, a close record for the allowed ones, policy records
// for changes. Start opens the log's file (Config.LogFile, with
// Config.LogLimits) and keeps a Ring for the API; a request the policy
// allows goes on only once its record is committed (Log.Commit).
//
// The upstream pool (upstreampool.go) keeps idle upstream connections by
// the IP and port the guard passed, and a client connection holds the one
// its last request used; a connection is never reused for another address.
//
// The DNS stub (package gateway/dnsstub, which the server makes and Start
// serves on Config.DNS, over UDP and TCP) answers from the policy alone and never sends a query anywhere,
// so no name reaches a real resolver before a connection to it is decided
// and DNS cannot carry data out (docs/capture.md). It answers A for a name
// that netpolicy's DecideHost lets through on some port (every valid name
// in audit mode) with a fake address from 198.18.0.0/15 that the name
// keeps for the server's life, allocated in order; Server.FakeIPs maps an
// address back to its name for the transparent path. Once all
// 131 070 addresses are taken, a new name gets SERVFAIL and the names
// already answered keep theirs. A name blocked on every port, and a name
// that does not normalize (NXDOMAIN is final, where REFUSED would send a
// client to retry or to another server), gets NXDOMAIN whatever the type;
// AAAA, HTTPS and SVCB get no records (NOERROR); every other type or class
// is REFUSED, a message that does not parse FORMERR, another opcode
// NOTIMP, an EDNS version but 0 BADVERS. Names with a static answer in the
// Resolver and IP literals get fake addresses too, never their own.
// Answers have a TTL of 5 s and echo the question as asked; a response
// stays within 512 bytes, or the client's EDNS size up to 1232, and a
// query over 1232 bytes is FORMERR. Every message is one decision record
// of kind dns (decisionlog.KindDNS): host the normalized name, method the query type,
// port 53, status the response code.
//
// The scripted LLM (docs/mock-llm.md): a host in Config.MockLLM (--mock-llm)
// is answered by its mockllm.Responder, whatever the policy says, and never
// dialed; a request an intercept rule with response {llm: NAME} decides is
// answered by Config.LLMScripts[NAME]. The scripts are fixed when Start takes
// them, and the Store refuses a policy that names any other (AddCheck), so
// no policy makes the gateway read a file. Config.RecordLLM records what
// an inspected host answered, as a script.
//
// The package imports no other package of sbx but netpolicy and its own
// gateway/api, gateway/decisionlog, gateway/dnsstub, gateway/mockllm and
// gateway/secretscrub.
package gateway
