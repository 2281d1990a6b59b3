// Package netpolicy is sbx's rule language: it parses and checks policy
// documents, normalizes host names, and decides what a request may reach.
// docs/policy.md is its contract.
//
// The flow is Decode (a document to a checked Spec, every problem with its
// line) → Compile (a Spec to an immutable, indexed Policy) → Policy.Decide
// (a Target to a Decision). Parse and ParseFile do the first two at once;
// FlagRules turns command-line patterns into rules for a Spec. A Store holds
// the policy of a running gateway: readers Load a Snapshot without locking,
// writers Replace, AddRule and RemoveRule, and every change bumps the
// version.
//
// Host names are compared only in the form NormalizeHost gives (lower case,
// no trailing dot, punycode, IPv6 without brackets, IPv4-mapped addresses
// unmapped). A target that cannot be normalized, such as 127.1 or
// user@host, never matches a rule: Decide blocks it with rule "invalid".
//
// DecideHost gives the verdict on a host over every port, method and path,
// for the gateway's DNS stub, which must answer for a name before it knows
// what will be asked of it: allowed when some request to the host could be
// let through, blocked when every port is blocked. MayAllowHost adds the
// mode: in audit mode every valid host may be let through.
//
// Inspects says for which hosts and ports the gateway terminates TLS and
// decides each HTTPS request (docs/inspection.md): those that a rule marks with
// inspect: true, or whose rules have methods, a path or action intercept.
// An inspect-only rule (inspect: true and no action, as --inspect makes)
// only marks hosts; every decision is made as if it were absent. An
// inspected CONNECT is decided by DecideTunnel, which refuses it only when
// no request through it could be let through, and each request inside by
// Decide, with its method and path.
//
// An intercept rule answers with a canned response (status, headers,
// body) or with a scripted LLM (response: {llm: SCRIPT}, docs/mock-llm.md).
// netpolicy only carries the script's name: LLMScripts lists the names a
// policy uses, and a Store check (AddCheck) lets the gateway refuse a
// policy naming a script it did not load when it started.
//
// Decide is indexed: exact names and "*.domain" suffixes are map lookups,
// IP and CIDR rules are looked up per prefix length, so a decision costs
// about the same with ten rules or ten thousand. Decide does no DNS;
// GuardAddr applies the address guard of docs/gateway.md to an address the
// caller resolved.
//
// The package imports nothing else of sbx but its strictyaml, the decoder
// it shares with mock LLM scripts, and does no I/O but reading a
// policy file.
package netpolicy
