package gateway

// The keep-alive of the gateway's TCP connections, both ways: Go's
// defaults (net.Dialer's and net.ListenConfig's with KeepAlive 0), set by
// Go on each upstream connection and, on Linux, once on each of the
// gateway's listeners for their connections to inherit
// (listenerKeepAlive). Upstream, probes every 15 s keep the state of the
// NATs and firewalls between the gateway and the upstream (some drop an
// idle connection after 4 or 6 minutes) for a tunnel idle up to its
// Limits.IdleTunnelTimeout, which may be longer, and end a connection to
// an upstream gone silently after about 2.5 minutes; toward the client,
// they end the connection of a client gone without closing it (a node or
// a veth gone) as soon, ahead of the idle timeouts.
const (
	keepAliveIdle     = 15 // seconds without a byte either way before the first probe
	keepAliveInterval = 15 // seconds between unanswered probes
	keepAliveCount    = 9  // unanswered probes that drop the connection
)
