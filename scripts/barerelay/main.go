// Command barerelay is the least a Go HTTP forward proxy built as sbx's
// gateway is (a goroutine per client connection, an upstream connection
// kept for it, buffered reads and one write per message) can do per
// request: it decides nothing, logs nothing and checks nothing.
// scripts/bench-gateway.sh measures it beside sbx gateway in the same
// rounds, so that sbx/barerelay is what sbx's own work costs, and
// barerelay against the nginx proxy what Go's runtime does.
//
// It is a benchmark baseline, not a proxy: it serves only requests
// without a body, in absolute form, to the one upstream it is given, and
// relays only answers framed by Content-Length. Anything else ends the
// connection.
//
//	barerelay -listen 127.0.0.1:18132 -upstream 127.0.0.1:18081
package main

import (
	"bufio"
	"bytes"
	"flag"
	"log"
	"net"
	"strconv"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18132", "where to serve, `ADDR`")
	upstream := flag.String("upstream", "", "the upstream's `ADDR`, the only one it reaches")
	flag.Parse()
	if *upstream == "" {
		log.Fatal("barerelay: -upstream is required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, *upstream)
	}
}

// serve relays c's requests to upstream over one connection of its own.
func serve(c net.Conn, upstream string) {
	defer c.Close()
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer u.Close()
	cr, cw := bufio.NewReader(c), bufio.NewWriter(c)
	ur, uw := bufio.NewReader(u), bufio.NewWriter(u)
	for {
		if !relayRequest(cr, uw) || uw.Flush() != nil || !relayResponse(ur, cw) || cw.Flush() != nil {
			return
		}
	}
}

// relayRequest copies a request head from r to w, its target made
// origin-form: "GET http://host/path HTTP/1.1" becomes "GET /path
// HTTP/1.1".
func relayRequest(r *bufio.Reader, w *bufio.Writer) bool {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return false
	}
	method, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return false
	}
	if _, after, ok := bytes.Cut(rest, []byte("://")); ok {
		if i := bytes.IndexByte(after, '/'); i >= 0 {
			rest = after[i:]
		}
	}
	w.Write(method)
	w.WriteByte(' ')
	w.Write(rest)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return false
		}
		w.Write(line)
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return true
		}
	}
}

// relayResponse copies a response head and its Content-Length body from
// r to w.
func relayResponse(r *bufio.Reader, w *bufio.Writer) bool {
	n := -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return false
		}
		w.Write(line)
		name, value, ok := bytes.Cut(line, []byte{':'})
		if ok && bytes.EqualFold(name, []byte("Content-Length")) {
			if n, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil {
				return false
			}
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
	}
	if n < 0 {
		return false
	}
	for n > 0 {
		if r.Buffered() == 0 {
			if _, err := r.Peek(1); err != nil {
				return false
			}
		}
		p, _ := r.Peek(min(n, r.Buffered()))
		w.Write(p)
		r.Discard(len(p))
		n -= len(p)
	}
	return true
}
