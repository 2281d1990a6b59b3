package selftest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// The probe's side of sbx selftest: the attempts, made by the same code
// inside the sandbox and, as controls, on the host.

// maxRead is how much of an answer an attempt keeps.
const maxRead = 1024

// RunProbe reads a plan from in, makes every attempt at once and writes
// what each saw to out as one JSON object.
func RunProbe(ctx context.Context, in io.Reader, out io.Writer) error {
	var plan probePlan
	if err := json.NewDecoder(in).Decode(&plan); err != nil {
		return fmt.Errorf("reading the plan: %w", err)
	}
	rep := probeReport{Results: map[string]observation{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range plan.Attempts {
		// Ends when the attempt does: within attemptTimeout.
		wg.Go(func() {
			o := runAttempt(ctx, a)
			mu.Lock()
			rep.Results[a.ID] = o
			mu.Unlock()
		})
	}
	wg.Wait()
	return json.NewEncoder(out).Encode(rep)
}

// runAttempt makes a and says what it saw, within attemptTimeout. It
// makes every socket on the calling goroutine's thread, so that a caller
// that locked its thread in a network namespace makes the attempt from
// there.
func runAttempt(ctx context.Context, a probeAttempt) observation {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	o := makeAttempt(ctx, a)
	o.TimedOut = ctx.Err() == context.DeadlineExceeded
	return o
}

// makeAttempt is runAttempt's work, until ctx ends.
func makeAttempt(ctx context.Context, a probeAttempt) observation {
	switch a.Kind {
	case attemptTCP:
		return tryTCP(ctx, a)
	case attemptUDP:
		return tryUDP(ctx, a)
	case attemptDNSUDP, attemptDNSTCP:
		return tryDNS(ctx, a, a.Kind == attemptDNSTCP)
	case attemptPing, attemptPingRaw:
		return tryPing(ctx, a, a.Kind == attemptPingRaw)
	case attemptUnix:
		return tryUnix(ctx, a)
	case attemptRawSocket:
		return tryRawSockets()
	case attemptCaps:
		return readSecurityStatus()
	case attemptNetns:
		return tryNetns(ctx, a)
	}
	return observation{Err: "unknown attempt kind " + a.Kind}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// exchange sends send on c, then reads until c is closed, maxRead bytes
// come or ctx ends.
func exchange(ctx context.Context, c net.Conn, send string) observation {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if send != "" {
		if _, err := io.WriteString(c, send); err != nil {
			return observation{Err: "sending: " + err.Error()}
		}
	}
	data, err := io.ReadAll(io.LimitReader(c, maxRead))
	return observation{Data: string(data), Err: errString(err)}
}

// tryTCP connects to a.Addr, or to a.Name (resolved through the system's
// DNS configuration, as a program would) on a.Port, sends a.Send and reads
// the answer.
func tryTCP(ctx context.Context, a probeAttempt) observation {
	addr := a.Addr
	var addrs []string
	if a.Name != "" {
		r := &net.Resolver{PreferGo: true}
		ips, err := r.LookupNetIP(ctx, "ip4", a.Name)
		for _, ip := range ips {
			addrs = append(addrs, ip.String())
		}
		if err != nil || len(ips) == 0 {
			return observation{Addrs: addrs, Err: fmt.Sprintf("resolving %s: %v", a.Name, err)}
		}
		addr = net.JoinHostPort(ips[0].String(), strconv.Itoa(a.Port))
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return observation{Addrs: addrs, Err: err.Error()}
	}
	defer c.Close()
	o := exchange(ctx, c, a.Send)
	o.Addrs = addrs
	return o
}

// tryUDP sends a.Send to a.Addr and reads one datagram back.
func tryUDP(ctx context.Context, a probeAttempt) observation {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", a.Addr)
	if err != nil {
		return observation{Err: err.Error()}
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, a.Send); err != nil {
		return observation{Err: "sending: " + err.Error()}
	}
	buf := make([]byte, maxRead)
	n, err := c.Read(buf)
	return observation{Data: string(buf[:n]), Err: errString(err)}
}

// tryDNS asks the server a.Addr for a.Name's A record, over UDP or TCP.
func tryDNS(ctx context.Context, a probeAttempt, overTCP bool) observation {
	name, err := dnsmessage.NewName(strings.TrimSuffix(a.Name, ".") + ".")
	if err != nil {
		return observation{Err: err.Error()}
	}
	var idb [2]byte
	rand.Read(idb[:])
	id := binary.BigEndian.Uint16(idb[:])
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	query, err := b.Finish()
	if err != nil {
		return observation{Err: err.Error()}
	}
	network := "udp"
	if overTCP {
		network = "tcp"
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, a.Addr)
	if err != nil {
		return observation{Err: err.Error()}
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	answer, o := exchangeDNS(c, query, overTCP)
	if o.Err != "" {
		return o
	}
	return readDNSAnswer(answer, id)
}

// exchangeDNS sends query on c and reads the answer, framed as over TCP
// or not; the observation says how it failed, if it did.
func exchangeDNS(c net.Conn, query []byte, overTCP bool) ([]byte, observation) {
	if !overTCP {
		if _, err := c.Write(query); err != nil {
			return nil, observation{Err: "sending: " + err.Error()}
		}
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			return nil, observation{Err: err.Error()}
		}
		return buf[:n], observation{}
	}
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(query)))
	if _, err := c.Write(append(msg, query...)); err != nil {
		return nil, observation{Err: "sending: " + err.Error()}
	}
	var n uint16
	if err := binary.Read(c, binary.BigEndian, &n); err != nil {
		return nil, observation{Err: err.Error()}
	}
	answer := make([]byte, n)
	if _, err := io.ReadFull(c, answer); err != nil {
		return nil, observation{Err: err.Error()}
	}
	return answer, observation{}
}

// readDNSAnswer says what answer, to the query id, holds: its code and
// A records.
func readDNSAnswer(answer []byte, id uint16) observation {
	var p dnsmessage.Parser
	h, err := p.Start(answer)
	if err != nil || h.ID != id || !h.Response {
		return observation{Err: fmt.Sprintf("not an answer to the query (%d bytes)", len(answer))}
	}
	o := observation{Answered: true, Rcode: int(h.RCode)}
	if err := p.SkipAllQuestions(); err != nil {
		o.Err = err.Error()
		return o
	}
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			break
		}
		if rh.Type != dnsmessage.TypeA {
			p.SkipAnswer()
			continue
		}
		r, err := p.AResource()
		if err != nil {
			break
		}
		o.Addrs = append(o.Addrs, netip.AddrFrom4(r.A).String())
	}
	return o
}

// tryPing sends an ICMP echo request carrying a.Token to a.Addr, from a
// ping socket (what ping uses unprivileged) or a raw one, and waits for
// the reply.
func tryPing(ctx context.Context, a probeAttempt, raw bool) observation {
	network := "udp4"
	if raw {
		network = "ip4:icmp"
	}
	c, err := icmp.ListenPacket(network, "0.0.0.0")
	if err != nil {
		return observation{Err: "opening the socket: " + err.Error()}
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	ip := net.ParseIP(a.Addr)
	var dst net.Addr = &net.IPAddr{IP: ip}
	if !raw {
		dst = &net.UDPAddr{IP: ip}
	}
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte(a.Token)}}
	wb, err := msg.Marshal(nil)
	if err != nil {
		return observation{Err: err.Error()}
	}
	if _, err := c.WriteTo(wb, dst); err != nil {
		return observation{Err: "sending: " + err.Error()}
	}
	var seen []string
	buf := make([]byte, 1500)
	for {
		n, peer, err := c.ReadFrom(buf)
		if err != nil {
			o := observation{Err: err.Error()}
			if len(seen) > 0 {
				o.Err += "; got " + strings.Join(seen, ", ")
			}
			return o
		}
		m, err := icmp.ParseMessage(1, buf[:n]) // 1: ICMP for IPv4
		if err != nil {
			continue
		}
		if echo, ok := m.Body.(*icmp.Echo); ok && m.Type == ipv4.ICMPTypeEchoReply && string(echo.Data) == a.Token {
			return observation{Data: "echo reply from " + peer.String()}
		}
		if m.Type != ipv4.ICMPTypeEcho && m.Type != ipv4.ICMPTypeEchoReply && len(seen) < 3 {
			seen = append(seen, fmt.Sprintf("%v from %v", m.Type, peer))
		}
	}
}

// tryUnix looks for the unix socket a.Path and, when it is there, sends
// a.Send on it and reads the answer.
func tryUnix(ctx context.Context, a probeAttempt) observation {
	if _, err := os.Stat(a.Path); err != nil {
		return observation{Err: err.Error()}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", a.Path)
	if err != nil {
		return observation{Exists: true, Err: err.Error()}
	}
	defer c.Close()
	o := exchange(ctx, c, a.Send)
	o.Exists = true
	return o
}

// tryRawSockets opens the sockets that build packets of their own: raw IP
// (any protocol, and ICMP) and raw packet sockets. Data lists those that
// opened.
func tryRawSockets() observation {
	var opened, errs []string
	for _, s := range []struct {
		name               string
		domain, typ, proto int
	}{
		{"AF_INET/SOCK_RAW/IPPROTO_RAW", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW},
		{"AF_INET/SOCK_RAW/IPPROTO_ICMP", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP},
		{"AF_PACKET/SOCK_RAW", unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL))},
	} {
		fd, err := unix.Socket(s.domain, s.typ|unix.SOCK_CLOEXEC, s.proto)
		if err != nil {
			errs = append(errs, s.name+": "+err.Error())
			continue
		}
		unix.Close(fd)
		opened = append(opened, s.name)
	}
	var o observation
	if len(opened) > 0 {
		o.Data = "opened " + strings.Join(opened, ", ")
	}
	o.Err = strings.Join(errs, "; ")
	return o
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// readSecurityStatus reports the process's effective capabilities,
// no_new_privs and seccomp mode from /proc/self/status, as
// "CapEff=... NoNewPrivs=... Seccomp=...".
func readSecurityStatus() observation {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return observation{Err: err.Error()}
	}
	defer f.Close()
	fields := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, _ := strings.Cut(s.Text(), ":")
		fields[k] = strings.TrimSpace(v)
	}
	return observation{Data: fmt.Sprintf("CapEff=%s NoNewPrivs=%s Seccomp=%s", fields["CapEff"], fields["NoNewPrivs"], fields["Seccomp"])}
}

// netnsChildReport is what the child of a netns attempt prints.
type netnsChildReport struct {
	Links []string `json:"links"`
	Data  string   `json:"data,omitempty"`
	Err   string   `json:"err,omitempty"`
}

// tryNetns starts this program again in new namespaces (a.Name: "net",
// or "user+net", which needs no privilege where user namespaces are
// allowed); when they can be made, the child reports the links it sees
// and what a.Addr answered from there.
func tryNetns(ctx context.Context, a probeAttempt) observation {
	attr := &syscall.SysProcAttr{}
	switch a.Name {
	case "net":
		attr.Cloneflags = unix.CLONE_NEWNET
	case "user+net":
		attr.Cloneflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNET
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	default:
		return observation{Err: "unknown namespaces " + a.Name}
	}
	exe, err := os.Executable()
	if err != nil {
		return observation{Err: err.Error()}
	}
	cmd := exec.CommandContext(ctx, exe, ProbeCommand, "--"+ProbeNetnsChild, a.Addr)
	cmd.SysProcAttr = attr
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		return observation{Err: "creating namespaces: " + err.Error()}
	}
	err = cmd.Wait()
	return observation{Created: true, Data: strings.TrimSpace(out.String()), Err: errString(err)}
}

// RunNetnsChild is the child of tryNetns: it reports the links it sees
// and what addr answered a TCP connection.
func RunNetnsChild(ctx context.Context, out io.Writer, addr string) error {
	var r netnsChildReport
	ifs, err := net.Interfaces()
	if err != nil {
		r.Err = err.Error()
	}
	for _, i := range ifs {
		r.Links = append(r.Links, i.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	if c, err := d.DialContext(ctx, "tcp", addr); err != nil {
		r.Err = err.Error()
	} else {
		o := exchange(ctx, c, "probe netns\n")
		c.Close()
		r.Data, r.Err = o.Data, o.Err
	}
	return json.NewEncoder(out).Encode(r)
}
