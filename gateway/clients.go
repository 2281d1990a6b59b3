package gateway

import (
	"net/netip"
)

// SetClients replaces Config.Clients while the server runs (sbx kube
// tells its gateway pod the agent pod's address this way, once the agent
// pod has one): from then on, only clients in nets are served on the
// proxy, the capture listener and the DNS stub, and any other is refused
// as a client outside Config.Clients is (a reset, counted and logged with
// the reason "client <ip> is not this gateway's sandbox"). Open
// connections of clients outside nets are closed. An empty nets serves
// every client again, as an empty Config.Clients does. An invalid prefix
// is an error, and nothing changes.
func (s *Server) SetClients(nets []netip.Prefix) error {
	norm, err := normalizePrefixes("Clients", nets)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clientNets.Store(&norm)
	s.logger.Info("serving only these clients from now on", "clients", norm)
	for c := range s.conns {
		if !s.isClient(clientAddr(c)) {
			c.Close()
		}
	}
	return nil
}

// Clients returns the networks whose clients the server serves now:
// Config.Clients, or what SetClients set since; none means every client.
func (s *Server) Clients() []netip.Prefix {
	return append([]netip.Prefix(nil), *s.clientNets.Load()...)
}

// SetClients is the management API's PUT /v1/clients (api.ClientSetter).
func (g apiGateway) SetClients(nets []netip.Prefix) error { return g.s.SetClients(nets) }

// Clients is the management API's GET /v1/clients (api.ClientSetter).
func (g apiGateway) Clients() []netip.Prefix { return g.s.Clients() }
