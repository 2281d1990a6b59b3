// Command netprobe is built by the sandbox package's privileged tests,
// statically, and run as a sandbox's command to try, from inside, what
// docs/network.md forbids: every destination but the gateway's port, UDP,
// ICMP, raw sockets and IPv6. It prints one JSON object: each attempt
// with how long it took to fail, and its own credentials and security
// state from /proc/self/status. None of it is part of sbx.
//
// The gateway is taken from HTTP_PROXY; SBX_PROBE_OTHER is another
// port of the gateway's address on which something listens.
package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

type probe struct {
	Name    string        `json:"name"`
	OK      bool          `json:"ok"`
	Err     string        `json:"err,omitempty"`
	Elapsed time.Duration `json:"elapsed"`
}

type report struct {
	Probes []probe           `json:"probes"`
	Status map[string]string `json:"status"`
	UID    int               `json:"uid"`
	Links  []string          `json:"links"`
	Netns  uint64            `json:"netns"` // the inode of its network namespace
}

func main() {
	gw := strings.TrimPrefix(os.Getenv("HTTP_PROXY"), "http://")
	host, _, _ := net.SplitHostPort(gw)
	other := net.JoinHostPort(host, os.Getenv("SBX_PROBE_OTHER"))
	r := report{Status: map[string]string{}, UID: os.Getuid()}
	try := func(name string, fn func() error) {
		start := time.Now()
		err := fn()
		p := probe{Name: name, OK: err == nil, Elapsed: time.Since(start)}
		if err != nil {
			p.Err = err.Error()
		}
		r.Probes = append(r.Probes, p)
	}
	const timeout = 3 * time.Second
	dialRead := func(network, addr string) error {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		_, err = io.ReadFull(c, make([]byte, 2))
		return err
	}
	udp := func(addr string) error {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		if _, err := c.Write([]byte("query")); err != nil {
			return err
		}
		_, err = c.Read(make([]byte, 10))
		return err
	}
	try("gateway port", func() error { return dialRead("tcp", gw) })
	try("gateway address, other port", func() error { return dialRead("tcp", other) })
	try("another address", func() error { return dialRead("tcp", "192.0.2.1:80") })
	try("udp to the gateway", func() error { return udp(net.JoinHostPort(host, "53")) })
	try("udp elsewhere", func() error { return udp("192.0.2.1:53") })
	try("icmp echo (ping socket)", func() error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, syscall.IPPROTO_ICMP)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		tv := syscall.NsecToTimeval(int64(timeout))
		syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
		var to syscall.SockaddrInet4
		copy(to.Addr[:], net.ParseIP(host).To4())
		echo := []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0} // type 8, code 0, checksum, id and seq 0
		if err := syscall.Sendto(fd, echo, 0, &to); err != nil {
			return err
		}
		_, _, err = syscall.Recvfrom(fd, make([]byte, 64), 0)
		return err
	})
	try("icmp (raw socket)", func() error {
		c, err := net.Dial("ip4:icmp", host)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
	try("raw socket", func() error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
		if err != nil {
			return err
		}
		syscall.Close(fd)
		return nil
	})
	try("ipv6", func() error { return dialRead("tcp6", "[2001:db8::1]:80") })
	try("ipv6 link-local", func() error {
		ifs, _ := net.Interfaces()
		for _, i := range ifs {
			if strings.HasPrefix(i.Name, "sbxc") {
				return dialRead("tcp6", "[fe80::1%"+i.Name+"]:3128")
			}
		}
		return dialRead("tcp6", "[fe80::1]:3128")
	})
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			r.Links = append(r.Links, i.Name)
		}
	}
	var st syscall.Stat_t
	if syscall.Stat("/proc/self/ns/net", &st) == nil {
		r.Netns = st.Ino
	}
	if f, err := os.Open("/proc/self/status"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			k, v, _ := strings.Cut(s.Text(), ":")
			r.Status[k] = strings.TrimSpace(v)
		}
		f.Close()
	}
	json.NewEncoder(os.Stdout).Encode(r)
}
