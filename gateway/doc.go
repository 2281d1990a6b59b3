// Package gateway is sbx's way out of a sandbox: an HTTP/1.1 forward proxy
// and CONNECT tunnel that decides every request with a netpolicy.Store,
// refuses what the address guard refuses, dials exactly the address it
// checked, and logs every decision (DESIGN.md §4 and §5).
//
// A request goes through parse (strict framing: ambiguous requests are
// refused, not guessed at) → normalize the target → decide → resolve
// (static answers first, then the system resolver, always as a fully
// qualified name) → guard every resolved address → dial the first address
// that passed, never a name → relay → log. Intercept rules are answered
// by the gateway itself; a CONNECT's first bytes are checked for a TLS
// server name that differs from the CONNECT host.
//
// A sandbox's gateway serves that sandbox alone: its listener is bound to
// the sandbox's veth (Options.ListenInterface) and a connection from any
// other address is closed unanswered (Config.Clients). Whatever the policy
// says, it never dials its own addresses, this host's interface addresses
// (loopback aside, which the guard handles) or the Fence networks (sbx run
// gives its subnet pool and the default one).
//
// The decision log (Log, Record, FileSink, Ring) is the contract of
// DESIGN.md §5: one decision record per request or tunnel, a close record
// for the allowed ones, policy records for changes. Its file may sit in a
// directory a sandbox can write, so OpenFileSink appends only to a regular
// file of its own uid with one link, never following a symbolic link or
// blocking on a pipe there; and a FileSink keeps to a budget (records a
// second, bytes in all) so that a flooding sandbox cannot fill the disk:
// it leaves records over the budget out, never policy records, and writes
// a dropped record counting them (FileSinkOptions).
//
// The package imports no other package of sbx but netpolicy.
package gateway
