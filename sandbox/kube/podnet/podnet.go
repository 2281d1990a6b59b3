package podnet

import (
	"errors"
	"fmt"
	"net/netip"
)

// The ports and the shim's uid of an agent pod, as sbx kube makes it.
const (
	// DefaultProxyPort is the gateway pod's HTTP proxy port.
	DefaultProxyPort = 3128
	// DefaultCapturePort is the gateway pod's capture port, where the
	// shim hands connections over with their original destination.
	DefaultCapturePort = 15002
	// DefaultDNSPort is the gateway pod's DNS port (UDP and TCP).
	DefaultDNSPort = 5353
	// DefaultShimPort is the shim's port on the agent pod's 127.0.0.1.
	DefaultShimPort = 15001
	// DefaultShimUID is the uid the shim runs as: the only one whose
	// connections are not redirected, and that may reach the capture
	// port.
	DefaultShimUID = 15001
)

// Rules says what Install installs: the gateway pod's address and ports,
// the shim's port and uid.
type Rules struct {
	// Gateway is the gateway pod's address: IPv4 (the rules refuse
	// IPv6 whole).
	Gateway netip.Addr
	// ShimUID is the uid whose connections are not redirected and that
	// alone may reach the capture port: the shim's.
	ShimUID uint32
	// ShimPort is the shim's port on 127.0.0.1.
	ShimPort uint16
	// ProxyPort, CapturePort and DNSPort are the gateway's ports.
	ProxyPort, CapturePort, DNSPort uint16
}

// DefaultRules returns the Rules of an agent pod whose gateway pod is at
// gateway, with the default ports and uid.
func DefaultRules(gateway netip.Addr) Rules {
	return Rules{
		Gateway:     gateway,
		ShimUID:     DefaultShimUID,
		ShimPort:    DefaultShimPort,
		ProxyPort:   DefaultProxyPort,
		CapturePort: DefaultCapturePort,
		DNSPort:     DefaultDNSPort,
	}
}

// ErrInvalidRules is wrapped by the error Install returns for Rules it
// cannot install.
var ErrInvalidRules = errors.New("invalid pod rules")

// check returns an error wrapping ErrInvalidRules when r cannot be
// installed as it is.
func (r Rules) check() error {
	if !r.Gateway.Unmap().Is4() {
		return fmt.Errorf("%w: gateway address %v is not IPv4; give the gateway pod's IPv4 address (IPv6 pods are not supported)", ErrInvalidRules, r.Gateway)
	}
	if r.Gateway.Unmap().IsUnspecified() || r.Gateway.Unmap().IsLoopback() {
		return fmt.Errorf("%w: gateway address %v is not a pod's address; give the gateway pod's IP", ErrInvalidRules, r.Gateway)
	}
	if r.ShimUID == 0 {
		return fmt.Errorf("%w: shim uid 0 would exempt root's connections from capture; run the shim as a uid of its own (default %d)", ErrInvalidRules, DefaultShimUID)
	}
	ports := []struct {
		name string
		port uint16
	}{{"shim", r.ShimPort}, {"proxy", r.ProxyPort}, {"capture", r.CapturePort}, {"DNS", r.DNSPort}}
	for _, p := range ports {
		if p.port == 0 {
			return fmt.Errorf("%w: %s port 0; set it (default: DefaultRules)", ErrInvalidRules, p.name)
		}
	}
	if r.CapturePort == r.ProxyPort || r.CapturePort == r.DNSPort {
		return fmt.Errorf("%w: capture port %d is also the proxy or DNS port, which every uid may reach; give it a port of its own", ErrInvalidRules, r.CapturePort)
	}
	return nil
}

// String says what r installs, in one line.
func (r Rules) String() string {
	gw := r.Gateway.Unmap()
	return fmt.Sprintf("TCP to %v:%d (proxy) and %v:%d (DNS, where port 53 goes too), other TCP to the shim on 127.0.0.1:%d "+
		"(uid %d, which may reach only %v:%d); everything else rejected, IPv6 but loopback too; "+
		"nothing in but loopback and the replies to the pod's own connections",
		gw, r.ProxyPort, gw, r.DNSPort, r.ShimPort, r.ShimUID, gw, r.CapturePort)
}
