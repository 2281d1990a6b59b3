// Package run runs one command in a sandbox the way sbx run does: it
// composes the sandbox (namespace, rules, container runtime), the gateway
// the sandbox's only way out goes through, and the root filesystem the
// command sees.
//
// Start takes a Spec of plain values and, before it makes anything,
// chooses the user the command runs as (never host root unless asked),
// lays out the root filesystem, checks that the command can start there
// (a *rootfs.AccessError when it cannot), and checks that the decision
// log is where the sandbox cannot reach it (a *LogPathError). It then
// makes sure an image is in the runtime's store, makes the sandbox's TLS
// inspection CA and the trust its command gets, and starts the sandbox
// with a gateway configured from the Spec: capture's listeners and the
// refused packets' reports, the mock LLMs and the recordings. Wait, Stop
// and Close follow the sandbox's own; Close writes the recordings once
// the gateway is gone, so that every exchange is in.
//
// The package words nothing for a command line: its errors are typed
// (*LogPathError, *StartError, *ImageError, *RecordingError, and the
// sandbox's and rootfs's own) or neutral, and what a caller may want to
// tell its user comes as a Note. cmd/sbx words them with its flag names.
package run
