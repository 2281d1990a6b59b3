// Command probe is built by cmd/sbx's privileged tests, statically, and
// run inside sandboxes (and on the host) to try what an attacker would:
// plant file capabilities, make device nodes, fork and allocate without
// end. Each subcommand prints what happened; none of it is part of sbx.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe euid|setcap FILE|mknod PATH|forkbomb|sleep|alloc MIB|limits|dns udp|tcp SERVER NAME|udpflood ADDR N|udponce ADDR|icmp IP")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "euid":
		fmt.Printf("euid=%d egid=%d\n", os.Geteuid(), os.Getegid())
	case "setcap":
		// A version 2 security.capability: CAP_DAC_READ_SEARCH (2)
		// permitted and effective.
		data := []byte{0, 0, 0, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		data[0] = 1 // VFS_CAP_FLAGS_EFFECTIVE
		if err := syscall.Setxattr(os.Args[2], "security.capability", data, 0); err != nil {
			fmt.Printf("setcap: %v\n", err)
			return
		}
		fmt.Println("setcap: ok")
	case "mknod":
		if err := syscall.Mknod(os.Args[2], syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			fmt.Printf("mknod: %v\n", err)
			return
		}
		fmt.Println("mknod: ok")
	case "sleep":
		time.Sleep(time.Minute)
	case "forkbomb":
		// Starts sleeping children until the kernel refuses, holds them
		// for a while, and reports. It refuses to start without a pids
		// limit of at most 8192: a test that finds no limit must fail,
		// not take the host's last process slots.
		limit := readFirst("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max")
		if n, err := strconv.Atoi(limit); err != nil || n > 8192 {
			fmt.Printf("forkbomb: refused: pids.max is %q\n", limit)
			return
		}
		n := 0
		var err error
		null, _ := os.Open(os.DevNull) // one descriptor for all children
		for n < 100000 {
			c := exec.Command("/proc/self/exe", "sleep")
			c.Stdin, c.Stdout, c.Stderr = null, null, null
			if err = c.Start(); err != nil {
				break
			}
			c.Process.Release() // its pidfd: the descriptors must not run out first
			n++
		}
		fmt.Printf("forkbomb: started %d, then: %v\n", n, err)
		fmt.Printf("forkbomb: pids.events %s\n", readFirst("/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events"))
		time.Sleep(2 * time.Second)
		fmt.Println("forkbomb: done")
	case "alloc":
		mib, _ := strconv.Atoi(os.Args[2])
		var keep [][]byte
		for i := 1; i <= mib; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
			if i%128 == 0 {
				fmt.Printf("alloc: %d MiB\n", i)
			}
		}
		fmt.Printf("alloc: done %d MiB\n", len(keep))
	case "limits":
		// The cgroup limits as the sandbox sees them (v1 or v2).
		for _, f := range []string{
			"/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max",
			"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu.max",
			"/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events",
		} {
			if data, err := os.ReadFile(f); err == nil {
				name := f[strings.LastIndex(f, "/")+1:]
				fmt.Printf("%s=%s\n", name, strings.Join(strings.Fields(string(data)), " "))
			}
		}
		if f, err := os.Open("/proc/self/status"); err == nil {
			s := bufio.NewScanner(f)
			for s.Scan() {
				if strings.HasPrefix(s.Text(), "Cap") || strings.HasPrefix(s.Text(), "Groups") {
					fmt.Println(strings.Join(strings.Fields(s.Text()), " "))
				}
			}
			f.Close()
		}
	case "dns":
		// One A query for NAME to SERVER (ip:port) over udp or tcp; prints
		// the answer's rcode and addresses.
		fmt.Println(dnsQuery(os.Args[2], os.Args[3], os.Args[4]))
	case "udpflood":
		// N datagrams to ADDR from one socket, as fast as it can.
		n, _ := strconv.Atoi(os.Args[3])
		c, err := net.Dial("udp", os.Args[2])
		if err != nil {
			fmt.Printf("udpflood: %v\n", err)
			return
		}
		sent, failed := 0, 0
		for i := 0; i < n; i++ {
			if _, err := c.Write([]byte("flood")); err != nil {
				failed++ // the rules' ICMP error comes back as ECONNREFUSED
			} else {
				sent++
			}
		}
		fmt.Printf("udpflood: sent %d, refused %d\n", sent, failed)
		// The socket stays a while: a process that is gone by the time
		// the gateway reads the report cannot be named, and on a loaded
		// machine (CI's, with other tests' sandboxes and builds beside)
		// 300 ms was not always enough.
		time.Sleep(2 * time.Second)
	case "udponce":
		// One datagram to ADDR, and gone at once: by the time the
		// gateway reads its report, no socket is left to name.
		c, err := net.Dial("udp", os.Args[2])
		if err != nil {
			fmt.Printf("udponce: %v\n", err)
			return
		}
		_, err = c.Write([]byte("once"))
		fmt.Printf("udponce: %v\n", err)
	case "icmp":
		// An ICMP echo request over a raw socket (needs CAP_NET_RAW).
		c, err := net.Dial("ip4:icmp", os.Args[2])
		if err != nil {
			fmt.Printf("icmp: %v\n", err)
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte{8, 0, 0xf7, 0xfe, 0, 1, 0, 0}); err != nil {
			fmt.Printf("icmp: %v\n", err)
			return
		}
		b := make([]byte, 64)
		if _, err := c.Read(b); err != nil {
			fmt.Printf("icmp: no reply: %v\n", err)
			return
		}
		fmt.Println("icmp: reply")
	default:
		fmt.Fprintf(os.Stderr, "probe: unknown %q\n", os.Args[1])
		os.Exit(2)
	}
}

// dnsQuery sends one A query for name to server over network ("udp" or
// "tcp") and describes the answer: "rcode=N a=IP,IP" or "error: ...".
func dnsQuery(network, server, name string) string {
	q := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		q = append(q, byte(len(label)))
		q = append(q, label...)
	}
	q = append(q, 0, 0, 1, 0, 1) // root, type A, class IN
	c, err := net.DialTimeout(network, server, 3*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if network == "tcp" {
		q = append([]byte{byte(len(q) >> 8), byte(len(q))}, q...)
	}
	if _, err := c.Write(q); err != nil {
		return "error: " + err.Error()
	}
	resp := make([]byte, 1024)
	n, err := c.Read(resp)
	if err != nil {
		return "error: " + err.Error()
	}
	resp = resp[:n]
	if network == "tcp" {
		resp = resp[2:]
	}
	if len(resp) < 12 {
		return "error: short answer"
	}
	out := fmt.Sprintf("rcode=%d", resp[3]&0xf)
	// The answers follow the question: skip it, then read each A record.
	i := 12
	for i < len(resp) && resp[i] != 0 {
		i += int(resp[i]) + 1
	}
	i += 5
	var addrs []string
	for an := int(resp[6])<<8 | int(resp[7]); an > 0 && i+12 <= len(resp); an-- {
		i += 2 // a name pointer
		typ, rdlen := int(resp[i])<<8|int(resp[i+1]), int(resp[i+8])<<8|int(resp[i+9])
		i += 10
		if typ == 1 && rdlen == 4 && i+4 <= len(resp) {
			addrs = append(addrs, net.IP(resp[i:i+4]).String())
		}
		i += rdlen
	}
	return out + " a=" + strings.Join(addrs, ",")
}

// readFirst returns the trimmed content of the first of files that can be
// read, or "".
func readFirst(files ...string) string {
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil {
			return strings.TrimSpace(string(data))
		}
	}
	return ""
}
