package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sbx-dev/sbx/sandbox"
)

// captureUpstream is an upstream namespace with the services the capture
// tests reach by name: HTTP on 8080 (upstreamNamespace's), HTTPS on 8443
// for tls.test, an echo on 2222, a server that speaks first on 2223, a
// DNS server on 53 that answers every A query with the upstream's address
// and remembers the names it was asked, and a UDP sink on 9999.
type captureUpstream struct {
	*upstream
	CAFile string // the HTTPS server's CA, PEM, readable by anyone

	mu      sync.Mutex
	queries []string
	udp     atomic.Int64
	raw     atomic.Int64 // connections to the echo and banner services
}

func (u *captureUpstream) asked() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.queries...)
}

func newCaptureUpstream(t *testing.T, shared string) *captureUpstream {
	t.Helper()
	u := &captureUpstream{upstream: upstreamNamespace(t)}
	caPEM, cert := testCertificate(t, "tls.test")
	u.CAFile = filepath.Join(shared, "ca.pem")
	if err := os.WriteFile(u.CAFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	tlsLn := listenIn(t, u.Name, func() (io.Closer, error) { return net.Listen("tcp", u.Addr+":8443") }).(net.Listener)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello-tls\n") }),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(tlsLn, "", "")
	t.Cleanup(func() { srv.Close() })

	serve := func(port string, handle func(net.Conn)) {
		ln := listenIn(t, u.Name, func() (io.Closer, error) { return net.Listen("tcp", u.Addr+":"+port) }).(net.Listener)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				u.raw.Add(1)
				go func() { defer c.Close(); handle(c) }()
			}
		}()
	}
	serve("2222", func(c net.Conn) { io.Copy(c, c) })
	serve("2223", func(c net.Conn) { io.WriteString(c, "BANNER-FIRST\n"); io.Copy(io.Discard, c) })

	sink := listenIn(t, u.Name, func() (io.Closer, error) { return net.ListenPacket("udp", u.Addr+":9999") }).(net.PacketConn)
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := sink.ReadFrom(buf); err != nil {
				return
			}
			u.udp.Add(1)
		}
	}()

	dns := listenIn(t, u.Name, func() (io.Closer, error) { return net.ListenPacket("udp", u.Addr+":53") }).(net.PacketConn)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := dns.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			u.mu.Lock()
			u.queries = append(u.queries, strings.TrimSuffix(q.Name.String(), "."))
			u.mu.Unlock()
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
			b.StartQuestions()
			b.Question(q)
			b.StartAnswers()
			if q.Type == dnsmessage.TypeA {
				ip := net.ParseIP(u.Addr).To4()
				b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: [4]byte(ip)})
			}
			msg, _ := b.Finish()
			dns.WriteTo(msg, from)
		}
	}()
	return u
}

// testCertificate returns a CA's PEM and a certificate it signed for
// name: a host name, or an IP address (then in the certificate's IP
// addresses, as a client that dialed it wants).
func testCertificate(t *testing.T, name string) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sbx test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	if ip := net.ParseIP(name); ip != nil {
		leaf.IPAddresses = []net.IP{ip}
	} else {
		leaf.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// sharedDir returns a directory anyone may read, for files the sandbox's
// command (not root) reads through a read-only volume.
func readableDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readRecords decodes a decision log.
func readRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("a record that is not JSON: %q", line)
		}
		recs = append(recs, r)
	}
	return recs
}

// findRecord returns the first decision record for which match is true.
func findRecord(recs []map[string]any, match func(r map[string]any) bool) map[string]any {
	for _, r := range recs {
		if r["event"] == "decision" && match(r) {
			return r
		}
	}
	return nil
}

const capturePolicy = `version: 1
default: block
rules:
  - id: admin
    host: http.test
    ports: [8080]
    path: /admin
    action: block
  - id: http
    host: http.test
    ports: [8080]
    methods: [GET]
    action: allow
  - {id: tls, host: tls.test, ports: [8443], action: allow}
  - {id: raw, host: echo.test, ports: [2222], action: allow}
  - {id: banner, host: banner.test, ports: [2223], action: allow}
  - {id: late, host: late.test, ports: [8080], action: allow}
`

// TestPrivilegedCapture runs programs that ignore HTTP_PROXY in a sandbox
// with capture (the default), with the host's root filesystem (curl and
// node, when the host has them) and with a busybox one (wget, nc and the
// probe), and checks what each reached and what the log says
// (docs/capture.md): names answered with fake addresses by the stub, never
// forwarded; HTTP, TLS and raw TCP by name through the transparent path,
// with methods and path rules and the proxy's 403; mismatched SNI and Host
// blocked; DNS to any address reaching the stub; UDP refused and logged as
// bypass; the process named in the records.
func TestPrivilegedCapture(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	shared := readableDir(t)
	buildProbe(t, shared) // /t/probe in the sandbox
	up := newCaptureUpstream(t, shared)
	policy := writeFile(t, "policy.yaml", capturePolicy)
	// Every program resolves through the stub; the sandbox's commands
	// unset the proxy variables, as a program that ignores them would.
	checks := fmt.Sprintf(`unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy
GW=$(sed -n 's/^nameserver //p' /etc/resolv.conf)
echo "dns-udp-any: $(/t/probe dns udp %[1]s:53 echo.test)"
echo "dns-tcp-any: $(/t/probe dns tcp 10.214.255.53:53 echo.test)"
echo "dns-blocked: $(/t/probe dns udp $GW:53 secret-data.blocked.test)"
echo "raw: $( (echo ping-raw; sleep 1) | busybox nc -w 3 echo.test 2222)"
echo "banner: $(sleep 1 | busybox nc -w 3 banner.test 2223)"
echo "late-host: $( (sleep 1; printf 'GET / HTTP/1.1\r\nHost: http.test:8080\r\nConnection: close\r\n\r\n'; sleep 2) | busybox nc -w 3 late.test 8080 | head -n 1 | tr -d '\r')"
echo "udp: $(/t/probe udpflood %[1]s:9999 3)"
echo "udp-once: $(/t/probe udponce %[1]s:9998)"
`, up.Addr)
	for _, tc := range []struct {
		name, script string
		args         []string
	}{
		{"busybox", checks + `
echo "wget: $(wget -q -O- http://http.test:8080/ 2>&1)"
echo "wget-admin: $(wget -q -O- http://http.test:8080/admin/x 2>&1)"
echo "wget-ip: $(wget -q -O- http://` + up.Addr + `:8080/ 2>&1)"
`, []string{"--rootfs", busyboxRoot(t)}},
		{"host", checks + `
echo "curl: $(curl -sS -m 5 http://http.test:8080/)"
echo "curl-admin: $(curl -sS -m 5 -i http://http.test:8080/admin/x | tr -d '\r' | grep -i '^HTTP/\|^X-Sbx-Rule' | tr '\n' ' ')"
echo "curl-post: $(curl -sS -m 5 -o /dev/null -w '%{http_code}' -X POST http://http.test:8080/)"
echo "curl-host: $(curl -sS -m 5 -o /dev/null -w '%{http_code}' -H 'Host: tls.test:8080' http://http.test:8080/)"
echo "curl-tls: $(curl -sS -m 5 --cacert /t/ca.pem https://tls.test:8443/)"
echo "curl-sni: $(curl -sS -m 5 --cacert /t/ca.pem --connect-to tls.test:8443:echo.test:8443 https://tls.test:8443/ 2>&1 | head -c 80)"
if command -v node >/dev/null; then
echo "node: $(NODE_EXTRA_CA_CERTS=/t/ca.pem node -e 'Promise.all([fetch("http://http.test:8080/"), fetch("https://tls.test:8443/")].map(p => p.then(r => r.text()))).then(t => console.log(t.join("").trim().replace(/\n/g, "+")), e => console.log("error", e.cause || e))')"
fi
`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "host" {
				if _, err := exec.LookPath("curl"); err != nil {
					t.Skip("the host has no curl")
				}
			}
			dir := t.TempDir()
			logFile := filepath.Join(dir, "decisions.jsonl")
			args := append([]string{"run", "--runtime", "containerd", "--quiet", "--state-dir", filepath.Join(dir, "state"),
				"--subnet-pool", "10.213.236.0/24", "--log", logFile, "--policy", policy, "--host-dns", up.Addr,
				"--allow-private", up.Net, "-v", shared + ":/t:ro"}, tc.args...)
			stdout, stderr, code := runCLI(t, append(args, "--", "sh", "-c", tc.script)...)
			t.Logf("exit %d\n%s\n%s", code, stdout, stderr)
			out := map[string]string{}
			for _, line := range strings.Split(stdout, "\n") {
				if k, v, ok := strings.Cut(line, ": "); ok {
					out[k] = v
				}
			}
			recs := readRecords(t, logFile)

			// DNS: a fake address from the stub, whatever server was
			// asked (the upstream's real DNS server listens at the first
			// and would answer with its own address); NXDOMAIN for a
			// blocked name, which no resolver is ever asked.
			for _, k := range []string{"dns-udp-any", "dns-tcp-any"} {
				if !strings.HasPrefix(out[k], "rcode=0 a=198.18.") {
					t.Errorf("%s: %q, want a fake address from the stub", k, out[k])
				}
			}
			if !strings.HasPrefix(out["dns-blocked"], "rcode=3") {
				t.Errorf("a blocked name: %q, want NXDOMAIN", out["dns-blocked"])
			}
			for _, q := range up.asked() {
				if strings.Contains(q, "blocked") || strings.Contains(q, "secret") {
					t.Errorf("the host's resolver was asked for %q: a blocked name left the sandbox", q)
				}
			}
			if findRecord(recs, func(r map[string]any) bool {
				return r["kind"] == "dns" && r["host"] == "secret-data.blocked.test" && r["action"] == "block"
			}) == nil {
				t.Errorf("no dns record of the blocked name")
			}

			// Raw TCP by name, both ways round.
			if out["raw"] != "ping-raw" {
				t.Errorf("echo by name: %q", out["raw"])
			}
			if out["banner"] != "BANNER-FIRST" {
				t.Errorf("a server that speaks first: %q", out["banner"])
			}
			// A request sent a second after the connection, past the
			// wait for the first bytes, is checked as one on time.
			if out["late-host"] != "HTTP/1.1 403 Forbidden" {
				t.Errorf("a late request naming another host: %q, want 403", out["late-host"])
			}
			if findRecord(recs, func(r map[string]any) bool {
				return r["kind"] == "transparent" && r["host"] == "late.test" && strings.HasPrefix(r["reason"].(string), "host mismatch")
			}) == nil {
				t.Errorf("no host mismatch record of the late request")
			}
			if r := findRecord(recs, func(r map[string]any) bool {
				return r["kind"] == "transparent" && r["host"] == "echo.test" && r["port"] == 2222.0
			}); r == nil || r["action"] != "allow" {
				t.Errorf("echo's record: %v", r)
			}

			// UDP: refused and logged, never delivered.
			if n := up.udp.Load(); n != 0 {
				t.Errorf("the UDP sink got %d datagrams", n)
			}
			if r := findRecord(recs, func(r map[string]any) bool { return r["kind"] == "bypass" && r["host"] == up.Addr }); r == nil || r["proto"] != "udp" || r["port"] != 9999.0 || r["action"] != "block" {
				t.Errorf("no bypass record of the UDP datagrams: %v in %v", r, recs)
			}

			// Which process: the probe sent the queries and the datagrams,
			// nc made the raw connection; where a record names one, it is
			// the right one.
			for what, rec := range map[string]map[string]any{
				"probe":  findRecord(recs, func(r map[string]any) bool { return r["kind"] == "dns" && r["host"] == "secret-data.blocked.test" }),
				"probe ": findRecord(recs, func(r map[string]any) bool { return r["kind"] == "bypass" && r["host"] == up.Addr }),
				"busybox": findRecord(recs, func(r map[string]any) bool {
					return r["kind"] == "transparent" && r["host"] == "echo.test" && r["port"] == 2222.0
				}),
			} {
				if rec == nil || rec["comm"] != strings.TrimSpace(what) && !(what == "busybox" && rec["comm"] == "nc") {
					t.Errorf("want a record naming %s: %v", what, rec)
				} else if pid, _ := rec["pid"].(float64); pid <= 1 {
					t.Errorf("the record naming %s has pid %v", what, rec["pid"])
				}
			}
			for _, r := range recs {
				if r["event"] == "decision" && (r["comm"] == nil) != (r["pid"] == nil) {
					t.Errorf("a record with half a process: %v", r)
				}
				if r["event"] == "decision" && r["pid"] == nil && r["process_unknown"] == nil {
					t.Errorf("a record that names no process and does not say why (process_unknown): %v", r)
				}
			}
			// A process that sent one datagram and exited at once is named
			// when the gateway read the report before it was gone, else the
			// record says it was gone, or going (its socket not yet freed).
			if r := findRecord(recs, func(r map[string]any) bool { return r["kind"] == "bypass" && r["port"] == 9998.0 }); r == nil ||
				r["comm"] != "probe" && r["process_unknown"] != sandbox.ErrNoSocket.Error() && r["process_unknown"] != sandbox.ErrNoHolder.Error() {
				t.Errorf("the record of the datagram of a process that exited at once: %v; want it named probe, or process_unknown %q or %q", r, sandbox.ErrNoSocket, sandbox.ErrNoHolder)
			} else {
				t.Logf("the record of the datagram of a process that exited at once: comm %v, process_unknown %v", r["comm"], r["process_unknown"])
			}

			if tc.name == "busybox" {
				if !strings.Contains(out["wget"], "hello-upstream") {
					t.Errorf("wget by name: %q", out["wget"])
				}
				if strings.Contains(out["wget-admin"], "hello-upstream") || !strings.Contains(out["wget-admin"], "403") {
					t.Errorf("wget to a blocked path: %q", out["wget-admin"])
				}
				if strings.Contains(out["wget-ip"], "hello-upstream") {
					t.Errorf("wget to the upstream's IP, which no rule allows, was answered: %q", out["wget-ip"])
				}
				if r := findRecord(recs, func(r map[string]any) bool { return r["kind"] == "transparent" && r["host"] == up.Addr }); r == nil || r["action"] != "block" {
					t.Errorf("the IP was not decided as itself: %v", r)
				}
				return
			}
			if out["curl"] != "hello-upstream" {
				t.Errorf("curl by name: %q", out["curl"])
			}
			if !strings.Contains(out["curl-admin"], "403") || !strings.Contains(out["curl-admin"], "admin") {
				t.Errorf("curl to a blocked path: %q, want 403 by rule admin", out["curl-admin"])
			}
			if out["curl-post"] != "403" {
				t.Errorf("curl POST, which the methods rule does not allow: %q", out["curl-post"])
			}
			if out["curl-host"] != "403" {
				t.Errorf("curl with a Host header naming another host: %q", out["curl-host"])
			}
			if out["curl-tls"] != "hello-tls" {
				t.Errorf("curl over TLS by name: %q", out["curl-tls"])
			}
			if strings.Contains(out["curl-sni"], "hello-tls") {
				t.Errorf("a TLS server name that is not the address's name went through")
			}
			if findRecord(recs, func(r map[string]any) bool {
				return r["kind"] == "transparent" && r["host"] == "echo.test" && r["port"] == 8443.0 && strings.HasPrefix(r["reason"].(string), "sni mismatch")
			}) == nil {
				t.Errorf("no sni mismatch record")
			}
			r := findRecord(recs, func(r map[string]any) bool {
				return r["kind"] == "transparent" && r["host"] == "http.test" && r["method"] == "GET"
			})
			if r == nil || r["path"] != "/" || r["action"] != "allow" || r["rule"] != "http" {
				t.Errorf("curl's record: %v", r)
			}
			if r["comm"] != "curl" {
				// Every record of the sandbox's connections to http.test
				// and the ones around them, to tell whose this one was.
				var around []string
				for _, rec := range recs {
					if rec["kind"] == "transparent" || rec["kind"] == "http" {
						around = append(around, fmt.Sprint(rec))
					}
				}
				t.Errorf("curl's record does not name curl: %v\nthe sandbox's captured connections' records:\n%s", r, strings.Join(around, "\n"))
			}
			if _, err := exec.LookPath("node"); err == nil {
				if out["node"] != "hello-upstream+hello-tls" {
					t.Errorf("node fetch over HTTP and HTTPS: %q", out["node"])
				}
				r := findRecord(recs, func(r map[string]any) bool {
					return r["kind"] == "transparent" && r["host"] == "tls.test" && r["comm"] == "node"
				})
				if r == nil || r["action"] != "allow" || r["method"] != "" {
					t.Errorf("no transparent record of node's HTTPS request naming node: %v", r)
				}
			}
		})
	}
	// The gateway asked the host's resolver (the test's server) only for
	// names it dialed.
	t.Logf("names the host's resolver was asked: %v", up.asked())
}

// TestPrivilegedBypassFlood: ICMP (from a command given CAP_NET_RAW) and a
// flood of 100 000 UDP datagrams are refused inside the sandbox and
// logged as bypass records, the flood as a handful of records whose counts
// add up to no more than what was sent; the upstream gets nothing.
func TestPrivilegedBypassFlood(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	shared := readableDir(t)
	buildProbe(t, shared)
	up := newCaptureUpstream(t, shared)
	dir := t.TempDir()
	logFile := filepath.Join(dir, "decisions.jsonl")
	start := time.Now()
	stdout, stderr, code := runCLI(t, "run", "--runtime", "containerd", "--quiet", "--state-dir", filepath.Join(dir, "state"),
		"--subnet-pool", "10.213.235.0/24", "--log", logFile, "--rootfs", busyboxRoot(t), "-v", shared+":/t:ro",
		"--cap-add", "CAP_NET_RAW", "--", "sh", "-c", "/t/probe icmp "+up.Addr+"; /t/probe udpflood "+up.Addr+":9999 100000")
	elapsed := time.Since(start)
	t.Logf("exit %d in %v\n%s\n%s", code, elapsed, stdout, stderr)
	if !strings.Contains(stdout, "icmp: ") || strings.Contains(stdout, "icmp: reply") || !strings.Contains(stdout, "udpflood: sent") {
		t.Fatalf("the probe did not run as expected:\n%s", stdout)
	}
	if n := up.udp.Load(); n != 0 {
		t.Errorf("the upstream got %d datagrams", n)
	}
	recs := readRecords(t, logFile)
	var udp []map[string]any
	var counted float64
	for _, r := range recs {
		if r["kind"] == "bypass" && r["proto"] == "udp" {
			udp = append(udp, r)
			counted += r["count"].(float64)
		}
	}
	if len(udp) == 0 || len(udp) > 2+2*int(elapsed/time.Second) {
		t.Errorf("%d bypass records for a UDP flood of %v, want a few", len(udp), elapsed)
	}
	if counted < 1 || counted > 100000 {
		t.Errorf("the flood's records count %v packets", counted)
	}
	if r := findRecord(recs, func(r map[string]any) bool { return r["kind"] == "bypass" && r["proto"] == "icmp" }); r == nil || r["host"] != up.Addr || r["action"] != "block" {
		t.Errorf("no bypass record of the ICMP echo: %v", r)
	}
	t.Logf("%d records in all; the flood's %d count %v packets", len(recs), len(udp), counted)
}
