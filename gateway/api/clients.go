package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
)

// ClientSetter is what a Gateway implements when it can change, while it
// runs, the addresses whose clients it serves (gateway's
// Server.SetClients): the API then answers GET and PUT /v1/clients. sbx
// kube tells its gateway pod the agent pod's address this way. A Gateway
// without it answers those paths with 404.
type ClientSetter interface {
	// Clients returns the networks served now; none means every client.
	Clients() []netip.Prefix
	// SetClients replaces them: from then on every other client is
	// refused, and its open connections closed.
	SetClients([]netip.Prefix) error
}

// Clients is the body of PUT /v1/clients and the answer of GET and PUT
// /v1/clients: the networks (CIDRs; an address alone is a /32 or /128)
// whose clients the gateway serves. Empty serves every client that can
// connect.
type Clients struct {
	Clients []string `json:"clients"`
}

// maxClients bounds the networks one PUT /v1/clients may set.
const maxClients = 64

func (a *Server) clientSetter(w http.ResponseWriter) (ClientSetter, bool) {
	cs, ok := a.cfg.Gateway.(ClientSetter)
	if !ok {
		writeError(w, http.StatusNotFound, "this gateway cannot change the clients it serves")
	}
	return cs, ok
}

func clientsBody(nets []netip.Prefix) Clients {
	c := Clients{Clients: []string{}}
	for _, n := range nets {
		c.Clients = append(c.Clients, n.String())
	}
	return c
}

func (a *Server) getClients(w http.ResponseWriter, _ *http.Request) {
	if cs, ok := a.clientSetter(w); ok {
		writeJSON(w, http.StatusOK, clientsBody(cs.Clients()))
	}
}

func (a *Server) putClients(w http.ResponseWriter, r *http.Request) {
	cs, ok := a.clientSetter(w)
	if !ok {
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "reading the body: "+err.Error())
		return
	}
	var body Clients
	if err := json.Unmarshal(data, &body); err != nil || body.Clients == nil {
		writeError(w, http.StatusBadRequest, `want {"clients": ["10.244.0.7/32", ...]}`)
		return
	}
	nets, err := ParseClients(body.Clients)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := cs.SetClients(nets); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, clientsBody(cs.Clients()))
}

// ParseClients parses the networks of a Clients body: CIDRs, or
// addresses alone (a /32 or /128).
func ParseClients(list []string) ([]netip.Prefix, error) {
	if len(list) > maxClients {
		return nil, fmt.Errorf("%d clients: at most %d", len(list), maxClients)
	}
	var nets []netip.Prefix
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("client %q: want a CIDR such as 10.244.0.7/32 or an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		nets = append(nets, p)
	}
	return nets, nil
}

// Clients returns GET /v1/clients: the networks whose clients the gateway
// serves now (none: every client).
func (c *Client) Clients(ctx context.Context) (*Clients, error) {
	var out Clients
	if _, err := c.do(ctx, request{method: "GET", path: "/v1/clients"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetClients sends PUT /v1/clients: from then on the gateway serves only
// clients in nets, and refuses (and logs) every other.
func (c *Client) SetClients(ctx context.Context, nets []netip.Prefix) (*Clients, error) {
	body, err := json.Marshal(clientsBody(nets))
	if err != nil {
		return nil, err
	}
	var out Clients
	if _, err := c.do(ctx, request{method: "PUT", path: "/v1/clients", body: body, header: http.Header{"Content-Type": {"application/json"}}}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
