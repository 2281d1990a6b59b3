package decisionlog

// FieldCap is the key of Record.Cap: which per-client cap refused the
// request or connection of a decision record, one of the Cap constants.
// A record with a cap also has count: how many refusals by that cap it
// stands for (the gateway folds a flood of them, see docs/decision-log.md).
const FieldCap = "cap"

// The per-client caps of the gateway whose refusals are counted in the log
// (Record.Cap). Each names a limit of gateway.Limits.
const (
	// CapConns is the cap on a client's open connections
	// (Limits.MaxConnsPerClient); its refusals are KindConn records.
	CapConns = "conns_per_client"
	// CapTunnels is the cap on a client's open tunnels, CONNECT or
	// captured (Limits.MaxTunnelsPerClient); its refusals are the
	// decisions of the refused tunnels, kind KindConnect or
	// KindTransparent, status 429.
	CapTunnels = "tunnels_per_client"
)
