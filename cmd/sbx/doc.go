// Command sbx runs untrusted code in a network-isolated sandbox whose only
// way out is a policy-enforcing gateway (docs/architecture.md).
//
// This package is the command line only: each command turns its flags into
// the option values of one library package (netpolicy, gateway, sandbox,
// rootfs) and calls it. It is the one place that wires those packages
// together; layering_test.go checks that they do not import each other in
// ways docs/architecture.md forbids.
//
// Exit codes: 0 success; 1 when the thing asked about is invalid (a policy
// file) or the command failed; 2 for usage errors (bad flags, wrong number
// of arguments, a bad pattern or target on the command line).
package main
