// Package podnet is what runs inside a sbx kube agent pod besides the
// agent: the pod's own network rules (Install, run once by the pod's init
// container, which alone has NET_ADMIN) and the capture shim (Shim, a
// sidecar running as its own uid without capabilities).
//
// The rules, nftables in the pod's network namespace, leave the agent
// three ways out, all to its gateway pod: the proxy port, the DNS port
// (every query to port 53, whatever its address, is sent there), and the
// shim, to which every other TCP connection is redirected. The shim reads
// each connection's original destination from the pod's connection
// tracking, dials the gateway's capture port and writes that destination
// in a handoff header (package gateway/handoff) before relaying, so the
// gateway decides on it as on any captured connection. Only the shim's
// uid may reach the capture port. Everything else (other UDP, ICMP, the
// gateway's other ports, IPv6 but loopback) is rejected at once: a TCP
// reset or an ICMP administratively-prohibited error, so an attempt fails
// instead of hanging.
//
// Nothing comes in but loopback (where the shim, the rules' rejections and
// the kubelet's port-forwards arrive) and the replies to the pod's own
// connections: a connection opened from outside the pod is dropped, so
// nothing that can route to the pod's address gets a channel to the
// agent, even where the cluster does not enforce NetworkPolicy.
//
// The rules are the pod's inner layer; its NetworkPolicy, which lets the
// agent pod reach its gateway pod alone, is the outer one and holds
// without them (docs/kubernetes.md).
package podnet
