// Command tunnelload measures the gateway's memory with many idle CONNECT
// tunnels open (docs/performance.md: 10 000 idle tunnels, RSS at most 200 MiB).
// scripts/bench-tunnels.sh runs it against an `sbx gateway` it starts.
//
// It serves an upstream on 127.0.0.2 that accepts and holds connections,
// opens -n tunnels through the gateway at -proxy from source addresses
// 127.0.1.1, 127.0.1.2, ... (at most -per-source each: the gateway allows
// 1024 tunnels per client), waits for every one to be established, and
// prints the gateway's resident memory (from /proc/PID/status) before and
// with the tunnels open. It needs file descriptors for 2n sockets; the
// script raises the limit.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	proxy := flag.String("proxy", "127.0.0.1:3128", "the gateway's proxy `ADDR`")
	upstream := flag.String("upstream", "127.0.0.2:0", "where to serve the upstream")
	n := flag.Int("n", 10000, "tunnels to open")
	perSource := flag.Int("per-source", 1000, "tunnels per source address")
	pid := flag.Int("pid", 0, "the gateway's process id")
	settle := flag.Duration("settle", 2*time.Second, "how long to wait with the tunnels open before measuring")
	flag.Parse()
	if *pid == 0 {
		fail("-pid is required")
	}

	ln, err := net.Listen("tcp", *upstream)
	if err != nil {
		fail("upstream: %v", err)
	}
	var held sync.Mutex
	var upstreams []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held.Lock()
			upstreams = append(upstreams, c)
			held.Unlock()
		}
	}()

	before := rss(*pid)
	start := time.Now()
	conns := make([]net.Conn, *n)
	errs := make(chan error, *n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256) // connections being opened at once
	for i := range *n {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1 + i / *perSource))}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := open(src, *proxy, ln.Addr().String())
			if err != nil {
				errs <- fmt.Errorf("tunnel %d: %w", i, err)
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fail("%v", err)
	}
	opened := time.Since(start)
	time.Sleep(*settle)
	with := rss(*pid)
	fds, pipes := descriptors(*pid)
	held.Lock()
	accepted := len(upstreams)
	held.Unlock()
	fmt.Printf("tunnels open: %d (upstream accepted %d) in %v\n", *n, accepted, opened.Round(time.Millisecond))
	fmt.Printf("gateway descriptors: %d, of them %d pipes (a tunnel waiting on its upstream splices through one)\n", fds, pipes)
	per := float64(with-before) / float64(*n)
	fmt.Printf("gateway RSS: %.1f MiB before, %.1f MiB with the tunnels open: %.1f KiB per tunnel\n",
		mib(before), mib(with), per/1024)
	fmt.Printf("for 10000 idle tunnels: %.1f MiB (target <= 200 MiB)%s\n", mib(before+int64(per*10000)),
		map[bool]string{true: "", false: ", estimated from the tunnels measured"}[*n == 10000])
	for _, c := range conns {
		c.Close()
	}
}

// open makes one CONNECT tunnel from src through proxy to target.
func open(src *net.TCPAddr, proxy, target string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", proxy)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT: %s", resp.Status)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// rss returns the resident set size of process pid in bytes.
func rss(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		fail("reading the gateway's memory: %v", err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				fail("VmRSS %q: %v", rest, err)
			}
			return kb * 1024
		}
	}
	fail("no VmRSS in /proc/%d/status", pid)
	return 0
}

// descriptors counts the open file descriptors of process pid, and the
// pipes among them.
func descriptors(pid int) (fds, pipes int) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		fail("listing the gateway's descriptors: %v", err)
	}
	for _, e := range entries {
		if target, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(target, "pipe:") {
			pipes++
		}
	}
	return len(entries), pipes
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "tunnelload: "+format+"\n", args...)
	os.Exit(1)
}
