// Command auditlog writes a synthetic decision log of a given size for
// scripts/bench-audit.sh (docs/performance.md: sbx audit over a 1 GB log in at
// most 10 s and 200 MiB).
//
// The records are what a busy sandbox writes: mostly allowed requests and
// their close records to a few hundred hosts (npm, GitHub, a CDN), with
// paths drawn from a few thousand, blocked attempts, DNS queries, bypass
// records and the odd policy change, each naming a process. The log is
// encoded by decisionlog, as the gateway encodes it.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

func main() {
	size := flag.Int64("size", 1<<30, "stop after writing `BYTES`")
	out := flag.String("o", "decisions.jsonl", "write the log to `FILE`")
	flag.Parse()
	if err := write(*out, *size); err != nil {
		fmt.Fprintln(os.Stderr, "auditlog:", err)
		os.Exit(1)
	}
}

func write(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rnd := rand.New(rand.NewPCG(1, 2))
	hosts := make([]string, 300)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d.%s", i, []string{"registry.npmjs.org", "githubusercontent.com", "cdn.example.net", "api.example.com"}[i%4])
	}
	comms := []string{"node", "npm", "git", "curl", "python3"}
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	var buf []byte
	var written int64
	var seq uint64
	for written < size {
		seq++
		at = at.Add(time.Duration(rnd.IntN(2000)) * time.Microsecond)
		host := hosts[rnd.IntN(len(hosts))]
		comm := comms[rnd.IntN(len(comms))]
		r := decisionlog.Record{V: 1, Seq: seq, ID: fmt.Sprintf("c%x", seq), Event: decisionlog.EventDecision, Time: at,
			Sandbox: "1a2b3c4d", Client: fmt.Sprintf("10.213.0.2:%d", 30000+rnd.IntN(30000)), Kind: decisionlog.KindHTTP,
			Method: "GET", Host: host, Port: 80, Path: fmt.Sprintf("/pkg%d/-/pkg%d-1.%d.tgz", rnd.IntN(2000), rnd.IntN(2000), rnd.IntN(20)),
			Action: "allow", Enforced: true, Rule: "npm", Reason: "rule npm allows " + host, PolicyVersion: 1,
			PID: 100 + rnd.IntN(50), Comm: comm, Exe: "/usr/bin/" + comm}
		switch n := rnd.IntN(100); {
		case n < 40: // the close of an allowed request
			r.Event, r.Status, r.Upstream = decisionlog.EventClose, 200, "10.0.0.7:80"
			r.BytesOut, r.BytesIn, r.Duration = int64(200+rnd.IntN(500)), int64(rnd.IntN(1<<20)), time.Duration(rnd.IntN(1e9))
		case n < 55:
			r.Kind, r.Method, r.Port, r.Path = decisionlog.KindConnect, "CONNECT", 443, ""
		case n < 65:
			r.Kind, r.Method, r.Port, r.Path = decisionlog.KindTransparent, "", 443, ""
		case n < 75:
			r.Action, r.Rule, r.Reason, r.Status = "block", "default", "no rule matched; the default is block", 403
			r.Host = fmt.Sprintf("x%d.blocked.example", rnd.IntN(5000))
		case n < 92:
			r.Kind, r.Method, r.Port, r.Path = decisionlog.KindDNS, "A", 53, ""
		case n < 99:
			r.Kind, r.Method, r.Path, r.Action, r.Rule, r.Proto = decisionlog.KindBypass, "", "", "block", "guard", "udp"
			r.Host, r.Port, r.Count = fmt.Sprintf("10.9.%d.%d", rnd.IntN(4), rnd.IntN(250)), 9000+rnd.IntN(10), uint64(1+rnd.IntN(100))
		default:
			r = decisionlog.Record{V: 1, Seq: seq, Event: decisionlog.EventPolicy, Time: at, PolicyVersion: seq, Change: "rule r9 added"}
		}
		buf = append(r.AppendJSON(buf[:0]), '\n')
		n, err := w.Write(buf)
		if err != nil {
			return err
		}
		written += int64(n)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}
