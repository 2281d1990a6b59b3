//go:build linux

// Command looprelay is scripts/barerelay on an event loop: one OS thread
// waits in epoll for every connection and reads and writes them with
// plain system calls, as nginx's worker does, where barerelay (and sbx's
// gateway) give each client connection a goroutine that Go's scheduler
// parks and wakes. It decides, logs and checks nothing.
// scripts/bench-gateway.sh measures it beside the nginx proxy and
// barerelay in the same rounds: barerelay against looprelay is what a
// goroutine a connection costs in Go, looprelay against the nginx proxy
// what Go itself costs.
//
// With -work LOG it also does the least of sbx's own work for each
// request: a decision by a policy that allows the upstream (netpolicy,
// as the gateway decides), a decision record in LOG before the request
// goes upstream (one write takes the records of the requests that one
// wake of the loop read, before any of them is sent: a group commit), and
// a close record once the answer is relayed. It skips what sbx also
// does (checking every header, the address guard, deadlines, limits,
// secrets, asking), so that looprelay -work against the nginx proxy is
// an upper bound on what sbx on an event loop would reach.
//
// It is a benchmark baseline, not a proxy: it serves only requests
// without a body, in absolute form, to the one upstream it is given, and
// relays only answers framed by Content-Length. Anything else ends the
// connection.
//
//	looprelay -listen 127.0.0.1:18133 -upstream 127.0.0.1:18081 [-work LOG]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
	"golang.org/x/sys/unix"
)

// A side is one of a pair's two connections: the client's or the
// upstream's.
type side struct {
	fd     int
	peer   *side
	client bool
	in     []byte               // read and not yet relayed
	out    []byte               // to write when the socket takes it
	body   int                  // the upstream's: body bytes of the answer still to relay; -1 while its head is read
	status int                  // the upstream's: the status of the answer being relayed
	id     string               // the client's: the connection id its records share (-work)
	from   netip.AddrPort       // the client's: its address (-work)
	asked  []decisionlog.Record // the client's: the requests sent upstream and not yet answered (-work)
	held   bool                 // the upstream's: out waits for its requests' records to be written (-work)
}

type relay struct {
	ep       int
	upstream unix.Sockaddr
	sides    map[int]*side
	buf      []byte
	work     *work // nil without -work
}

// work is what -work adds: the policy, the log file, and the records
// gathered for it.
type work struct {
	policy  *netpolicy.Policy
	f       *os.File
	seq     uint64
	ids     uint64
	pending []byte  // records to write: decisions before their requests go upstream, closes with them
	held    []*side // upstream sides whose requests wait for pending
}

func main() {
	listenAt := flag.String("listen", "127.0.0.1:18133", "where to serve, `ADDR`")
	upstream := flag.String("upstream", "", "the upstream's `ADDR` (IPv4), the only one it reaches")
	logPath := flag.String("work", "", "decide each request and log it to `LOG`, as sbx does at the least")
	flag.Parse()
	up, err := netip.ParseAddrPort(*upstream)
	if err != nil || !up.Addr().Is4() {
		log.Fatalf("looprelay: -upstream %q: an IPv4 ADDR:PORT is required", *upstream)
	}
	at, err := netip.ParseAddrPort(*listenAt)
	if err != nil || !at.Addr().Is4() {
		log.Fatalf("looprelay: -listen %q: an IPv4 ADDR:PORT is required", *listenAt)
	}
	lfd, err := listen(sockaddr(at))
	if err != nil {
		log.Fatal("looprelay: ", err)
	}
	r := newRelay(sockaddr(up))
	if *logPath != "" {
		if r.work, err = newWork(up, *logPath); err != nil {
			log.Fatal("looprelay: ", err)
		}
	}
	runtime.LockOSThread() // the loop is the thread, as an nginx worker
	if err := r.serve(lfd); err != nil {
		log.Fatal("looprelay: ", err)
	}
}

func newWork(up netip.AddrPort, path string) (*work, error) {
	p, err := netpolicy.Parse("looprelay", fmt.Appendf(nil, "version: 1\ndefault: block\nrules:\n  - host: %q\n    ports: [%d]\n    action: allow\n", up.Addr(), up.Port()))
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	return &work{policy: p, f: f}, nil
}

func newRelay(upstream unix.Sockaddr) *relay {
	return &relay{upstream: upstream, sides: map[int]*side{}, buf: make([]byte, 64<<10)}
}

func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
}

// listen returns a listening, non-blocking socket at at.
func listen(at unix.Sockaddr) (int, error) {
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(lfd, at); err != nil {
		unix.Close(lfd)
		return -1, err
	}
	if err := unix.Listen(lfd, 1024); err != nil {
		unix.Close(lfd)
		return -1, err
	}
	return lfd, nil
}

// serve relays the clients of the listening socket lfd until a system
// call of the loop itself fails.
func (r *relay) serve(lfd int) error {
	var err error
	if r.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return err
	}
	if err := unix.EpollCtl(r.ep, unix.EPOLL_CTL_ADD, lfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(lfd)}); err != nil {
		return err
	}
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(r.ep, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			if int(ev.Fd) == lfd {
				r.accept(lfd)
				continue
			}
			s := r.sides[int(ev.Fd)]
			if s == nil {
				continue // closed by an event before this one
			}
			if ev.Events&unix.EPOLLOUT != 0 && !r.flush(s) {
				continue
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				r.read(s, ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0)
			}
		}
		if r.work != nil {
			if err := r.work.commit(r); err != nil {
				return err
			}
		}
	}
}

// accept takes every waiting client and connects it to the upstream.
// Both are edge-triggered: an event says that something came, and
// everything there is read.
func (r *relay) accept(lfd int) {
	for {
		cfd, sa, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return
		}
		ufd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			unix.Close(cfd)
			continue
		}
		if err := unix.Connect(ufd, r.upstream); err != nil && err != unix.EINPROGRESS {
			unix.Close(cfd)
			unix.Close(ufd)
			continue
		}
		c := &side{fd: cfd, client: true}
		if r.work != nil {
			r.work.ids++
			c.id = strconv.FormatUint(r.work.ids, 16)
			if a, ok := sa.(*unix.SockaddrInet4); ok {
				c.from = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
			}
		}
		u := &side{fd: ufd, body: -1}
		c.peer, u.peer = u, c
		for _, s := range []*side{c, u} {
			unix.SetsockoptInt(s.fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
			r.sides[s.fd] = s
			ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(s.fd)}
			unix.EpollCtl(r.ep, unix.EPOLL_CTL_ADD, s.fd, &ev)
		}
	}
}

// read reads everything s has and relays what it completes. A short
// read took all there was, unless the peer has also ended its side
// (ended): the one edge-triggered event that brought both is spent, so
// it reads on to the end. The bytes before an end are relayed before
// the pair is closed.
func (r *relay) read(s *side, ended bool) {
	eof := false
	for {
		n, err := unix.Read(s.fd, r.buf)
		if n > 0 {
			s.in = append(s.in, r.buf[:n]...)
		}
		if err == unix.EAGAIN || (err == nil && n > 0 && n < len(r.buf) && !ended) {
			break
		}
		if err != nil || n == 0 {
			eof = true
			break
		}
	}
	ok := false
	if s.client {
		ok = r.requests(s)
	} else {
		ok = r.answers(s)
	}
	if !ok || eof {
		r.close(s)
	}
}

// flush writes what waits for s. It reports false, having closed the
// pair, when the write fails.
func (r *relay) flush(s *side) bool {
	if s.held {
		return true // commit flushes it
	}
	for off := 0; off < len(s.out); {
		n, err := unix.Write(s.fd, s.out[off:])
		if err == unix.EAGAIN {
			s.out = s.out[:copy(s.out, s.out[off:])]
			return true // EPOLLOUT comes when it takes more
		}
		if err != nil {
			r.close(s)
			return false
		}
		off += n
	}
	s.out = s.out[:0]
	return true
}

func (r *relay) close(s *side) {
	for _, x := range []*side{s, s.peer} {
		if r.sides[x.fd] == x {
			delete(r.sides, x.fd)
			unix.Close(x.fd)
		}
	}
}

var crlf2 = []byte("\r\n\r\n")

// requests relays the whole request heads c holds, their targets made
// origin-form: "GET http://host/path HTTP/1.1" becomes "GET /path
// HTTP/1.1".
func (r *relay) requests(c *side) bool {
	u := c.peer
	p := c.in
	for {
		i := bytes.Index(p, crlf2)
		if i < 0 {
			break
		}
		line, rest, _ := bytes.Cut(p[:i+4], []byte("\r\n"))
		method, target, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			return false
		}
		_, after, ok := bytes.Cut(target, []byte("://"))
		if !ok {
			return false // absolute form only, as a forward proxy is sent
		}
		j := bytes.IndexByte(after, '/')
		if j < 0 {
			return false
		}
		path, _, _ := bytes.Cut(after[j:], []byte{' '}) // before " HTTP/1.1"
		if r.work != nil && !r.work.decide(c, method, after[:j], path) {
			return false
		}
		target = after[j:]
		u.out = append(u.out, method...)
		u.out = append(u.out, ' ')
		u.out = append(u.out, target...)
		u.out = append(u.out, "\r\n"...)
		u.out = append(u.out, rest...)
		p = p[i+4:]
	}
	c.in = c.in[:copy(c.in, p)] // what is left of a head, at the start
	if r.work != nil && len(u.out) > 0 && !u.held {
		u.held = true
		r.work.held = append(r.work.held, u) // sent once their records are written
		return true
	}
	return r.flush(u)
}

// answers relays the answers, or the parts of one, that u holds.
func (r *relay) answers(u *side) bool {
	c := u.peer
	p := u.in
	for len(p) > 0 {
		if u.body < 0 {
			i := bytes.Index(p, crlf2)
			if i < 0 {
				break
			}
			head := p[:i+4]
			u.body = -1
			if len(head) < 12 || !bytes.HasPrefix(head, []byte("HTTP/1.")) {
				return false
			}
			status, err := strconv.Atoi(string(head[9:12]))
			if err != nil {
				return false
			}
			u.status = status
			for _, line := range bytes.Split(head, []byte("\r\n")) {
				name, value, ok := bytes.Cut(line, []byte{':'})
				if ok && bytes.EqualFold(name, []byte("Content-Length")) {
					n, err := strconv.Atoi(string(bytes.TrimSpace(value)))
					if err != nil || n < 0 {
						return false
					}
					u.body = n
				}
			}
			if u.body < 0 {
				return false
			}
			c.out = append(c.out, head...)
			p = p[i+4:]
		}
		k := min(u.body, len(p))
		c.out = append(c.out, p[:k]...)
		p = p[k:]
		if u.body -= k; u.body > 0 {
			break
		}
		u.body = -1
		if r.work != nil {
			r.work.closed(c, u.status)
		}
	}
	u.in = u.in[:copy(u.in, p)]
	return r.flush(c)
}

// decide decides c's request for method and http://hostport/path,
// reporting false when the policy does not allow it, and adds its
// decision record to what the next commit writes.
func (w *work) decide(c *side, method, hostport, path []byte) bool {
	ap, err := netip.ParseAddrPort(string(hostport))
	if err != nil {
		return false
	}
	if i := bytes.IndexByte(path, '?'); i >= 0 {
		path = path[:i] // the query is never logged
	}
	t := netpolicy.Target{Host: ap.Addr().String(), Port: ap.Port(), Method: string(method), Path: string(path)}
	d := w.policy.Verdict(t)
	if d.Action != netpolicy.Allow {
		return false
	}
	c.asked = append(c.asked, decisionlog.Record{ID: c.id, Event: decisionlog.EventDecision, Time: time.Now(),
		Client: c.from.String(), Kind: decisionlog.KindHTTP, Method: t.Method, Host: t.Host, Port: int(t.Port),
		Path: t.Path, Action: string(d.Action), Enforced: true, Rule: d.Rule, Reason: d.Reason, Upstream: ap.String()})
	w.append(&c.asked[len(c.asked)-1])
	return true
}

// closed logs the close record of c's oldest request, answered with
// status.
func (w *work) closed(c *side, status int) {
	if len(c.asked) == 0 {
		return
	}
	cl := c.asked[0]
	cl.Event, cl.Status, cl.Duration = decisionlog.EventClose, status, time.Since(cl.Time)
	cl.Time = time.Time{}
	w.append(&cl)
	c.asked = c.asked[:copy(c.asked, c.asked[1:])]
}

func (w *work) append(rec *decisionlog.Record) {
	w.seq++
	rec.Seq, rec.V = w.seq, decisionlog.SchemaVersion
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	w.pending = append(rec.AppendJSON(w.pending), '\n')
}

// commit writes the records gathered in one wake of the loop with one
// write when a request waits for them (or when they fill 64 KiB), then
// sends the requests that waited.
func (w *work) commit(r *relay) error {
	if len(w.held) == 0 && len(w.pending) < 64<<10 {
		return nil
	}
	if _, err := w.f.Write(w.pending); err != nil {
		return err
	}
	w.pending = w.pending[:0]
	for i, u := range w.held {
		u.held = false
		if r.sides[u.fd] == u {
			r.flush(u)
		}
		w.held[i] = nil
	}
	w.held = w.held[:0]
	return nil
}
