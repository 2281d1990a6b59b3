package selftest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/gateway/escape"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// Options say how Run makes its sandboxes. Runtime is required; every
// other zero field has the default its comment names.
type Options struct {
	// Runtime runs the sandboxes, connected: *sandbox.Containerd, whose
	// sandboxes have the host's layout with the probe bind-mounted
	// read-only, or *sandbox.Docker, whose sandboxes run from an image
	// holding the probe that Run loads into DockerHost's store and
	// removes (the docker runtime runs images only). The caller closes
	// it, after Run.
	Runtime run.Runtime
	// DockerHost is the Docker daemon Runtime talks to, when it is
	// *sandbox.Docker: "" means DOCKER_HOST, or Docker's default.
	DockerHost string
	// ProbeExe is the probe, a path on the host: an executable that, run
	// as ProbeExe ProbeCommand, calls RunProbe with its standard input
	// and output; with the flag --wait (ProbeWait) added, reads its
	// standard input to the end and exits; with --netns-child ADDR
	// (ProbeNetnsChild), calls RunNetnsChild. sbx is one. It runs inside
	// the sandboxes: with containerd bind-mounted read-only, with Docker
	// in an image with the loader and libraries it links.
	ProbeExe string
	// StateDir is where running sandboxes are recorded; "" means
	// sandbox.DefaultStateDir. Pool is where the sandboxes' /30s come
	// from; the zero Prefix means sandbox.DefaultPool.
	StateDir string
	Pool     netip.Prefix
	// LogDir is where the decision logs are kept after a failure (a new
	// directory in it); "" means os.TempDir().
	LogDir string
	// Verbose writes, under each case, what each attempt and its control
	// saw.
	Verbose bool
	// FlushRules flushes the probed sandboxes' own rules, inside their
	// namespaces and on the host, before the probe runs: a broken
	// sandbox, which the report must show. For tests.
	FlushRules bool
	// Notes, if set, receives the run's Notes, in order.
	Notes func(Note)
}

// A Note is something Run tells its caller besides the report: Probing
// or LogsKept.
type Note interface{ note() }

// Probing says that the probe runs in sandbox ID: with HostLayer, with
// its namespace's rules flushed, so that only the host's stand; else as
// sbx run makes it. Outside is the outside's address, Other the second
// sandbox's id.
type Probing struct {
	ID        string
	HostLayer bool
	Outside   netip.Addr
	Other     string
}

// LogsKept says that the sandboxes' decision logs are kept in Dir, after
// a failure.
type LogsKept struct{ Dir string }

func (Probing) note()  {}
func (LogsKept) note() {}

// Summary counts the verdicts of a run's cases.
type Summary struct {
	Passed, Failed, Skipped int
}

// ErrInterrupted is Run's error when its context ended before it did.
var ErrInterrupted = errors.New("selftest interrupted; what it made is removed")

// The probe's command line: ProbeExe ProbeCommand [--wait |
// --netns-child ADDR], the flags named by ProbeWait and ProbeNetnsChild.
const (
	ProbeCommand    = "__selftest-probe"
	ProbeWait       = "wait"
	ProbeNetnsChild = "netns-child"
)

// HostLayerSuffix ends the names of the cases of the round whose sandbox
// has only the host's rules (its namespace's are flushed).
const HostLayerSuffix = ", host layer only"

// A Verdict is a case's: Pass, Fail or Skip, as the report writes it.
type Verdict string

// Verdicts of a case.
const (
	Pass Verdict = "PASS"
	Fail Verdict = "FAIL"
	Skip Verdict = "SKIP"
)

// Kinds of probeAttempt: what the probe tries, by the same code inside
// the sandbox and, as a control, outside it.
const (
	attemptTCP       = "tcp"        // connect to Addr (or Name:Port), send Send, read
	attemptUDP       = "udp"        // send Send to Addr, read a datagram
	attemptDNSUDP    = "dns-udp"    // ask Addr for Name's A record over UDP
	attemptDNSTCP    = "dns-tcp"    // the same over TCP
	attemptPing      = "ping"       // ICMP echo to Addr with Token, from a ping socket
	attemptPingRaw   = "ping-raw"   // the same from a raw socket
	attemptUnix      = "unix"       // stat the socket Path, connect, send Send, read
	attemptRawSocket = "raw-socket" // open raw IP and packet sockets
	attemptCaps      = "caps"       // read capabilities, no_new_privs and seccomp
	attemptNetns     = "netns"      // start a child in new namespaces (Name: net, user+net), which tries Addr
)

// probeAttempt is one thing the probe tries.
type probeAttempt struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Addr  string `json:"addr,omitempty"`
	Name  string `json:"name,omitempty"`
	Port  int    `json:"port,omitempty"`
	Path  string `json:"path,omitempty"`
	Send  string `json:"send,omitempty"`
	Token string `json:"token,omitempty"`
}

// attemptTimeout bounds one attempt. Inside a sound sandbox every attempt
// fails at once; the bound is for what hangs.
const attemptTimeout = 3 * time.Second

// probePlan is what sbx selftest sends the probe on its standard input.
type probePlan struct {
	Attempts []probeAttempt `json:"attempts"`
}

// probeReport is what the probe writes back: what each attempt, by id,
// saw.
type probeReport struct {
	Results map[string]observation `json:"results"`
}

// observation is what one attempt saw, reported as it is; sbx selftest
// judges it.
type observation struct {
	// Err is how the attempt failed, or stopped.
	Err string `json:"err,omitempty"`
	// Data is what came back (the first bytes), or, for the attempts that
	// look at the probe itself, what they found.
	Data string `json:"data,omitempty"`
	// Addrs are the addresses a name resolved to, or a DNS answer's.
	Addrs []string `json:"addrs,omitempty"`
	// Answered: a DNS answer came back (with Rcode).
	Answered bool `json:"answered,omitempty"`
	Rcode    int  `json:"rcode,omitempty"`
	// Exists: the unix socket's path exists; Created: the namespaces
	// were made.
	Exists  bool `json:"exists,omitempty"`
	Created bool `json:"created,omitempty"`
	// TimedOut: the attempt was still waiting when its time was up.
	TimedOut bool `json:"timed_out,omitempty"`
}

// short is o for a message: what came back, or how it failed.
func (o observation) short() string {
	var parts []string
	if o.Created {
		parts = append(parts, "made")
	}
	if o.Exists {
		parts = append(parts, "it exists")
	}
	if o.Answered {
		parts = append(parts, "DNS answer "+rcodeName(o.Rcode))
	}
	if o.Data != "" {
		parts = append(parts, `got "`+clip(o.Data, 80)+`"`) // clip escapes it
	}
	if len(o.Addrs) > 0 {
		parts = append(parts, "addresses "+strings.Join(o.Addrs, ","))
	}
	if o.Err != "" {
		parts = append(parts, clip(o.Err, 160))
	}
	if len(parts) == 0 {
		return "no answer"
	}
	return strings.Join(parts, "; ")
}

// rcodeName names a DNS answer's code as dig does.
func rcodeName(rcode int) string {
	if n, ok := map[int]string{0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}[rcode]; ok {
		return n
	}
	return "rcode " + strconv.Itoa(rcode)
}

// clip shortens s to n bytes, marking the cut, shows line breaks as " | "
// and replaces other control characters (the text came from a sandbox).
func clip(s string, n int) string {
	s = strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(s), "\r\n", "\n"), "\n", " | ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return printable(s)
}

// caseCheck is one attempt of a case with how it is judged.
type caseCheck struct {
	// what names the attempt in messages: "TCP to 10.214.3.2:4001".
	what string
	// attempt is made by the probe inside the sandbox.
	attempt probeAttempt
	// control is made from where the target may be reached: from the
	// host, or from controlNetns (a network namespace's path). Its Kind
	// "" means attempt itself.
	control      probeAttempt
	controlNetns string
	// reached says whether an observation reached the target: its secret
	// came back, say. controlReached judges the control instead, when the
	// control shows something else (that namespaces can be made at all).
	reached        func(observation) bool
	controlReached func(observation) bool
	// hits, when set, counts what the target's own server saw: while the
	// probe ran (anything at all means the attempt reached it), and in
	// all, the control included (nothing at all means the count proves
	// nothing).
	hits func() (probing, all int64)
	// extra, when set, finds what is wrong with the probe's observation
	// besides reaching the target ("" when nothing).
	extra func(observation) string
	// note, when set, says something worth knowing about a pass.
	note func(observation) string
}

// testCase is one line of the report: an escape that must fail, or
// (allowed) the one target that must be reached through the gateway.
type testCase struct {
	name    string
	checks  []caseCheck
	allowed bool
	// failFast: an attempt must fail at once (docs/network.md), not wait
	// until the probe gives up.
	failFast bool
	// skip, when set, is why the case cannot be tried on this machine.
	skip string
}

// caseResult is a judged case.
type caseResult struct {
	name, why string
	verdict   Verdict
	// seen says what each attempt and control saw, for --verbose.
	seen []string
}

// judgeCase judges c from the controls' and the probe's observations (by
// attempt id) and what the targets' servers saw. A case passes when every
// control reached its target and, for an escape, no probe attempt did
// (nor did its server see anything), or, for the allowed case, every one
// did.
func judgeCase(c testCase, controls, probe map[string]observation) caseResult {
	r := caseResult{name: c.name, verdict: Pass}
	if c.skip != "" {
		r.verdict, r.why = Skip, c.skip
		return r
	}
	var fails, notes []string
	for _, ch := range c.checks {
		ctl, ok := controls[ch.attempt.ID]
		r.seen = append(r.seen, fmt.Sprintf("%s: control %s: %s", ch.what, controlVantage(ch), ctl.short()))
		if obs, ok := probe[ch.attempt.ID]; ok {
			r.seen = append(r.seen, fmt.Sprintf("%s: probe: %s", ch.what, obs.short()))
		}
		controlReached := ch.reached
		if ch.controlReached != nil {
			controlReached = ch.controlReached
		}
		if !ok || !controlReached(ctl) {
			fails = append(fails, fmt.Sprintf("%s: the control, %s, did not reach the target (%s), so this case cannot tell", ch.what, controlVantage(ch), ctl.short()))
			continue
		}
		obs, ok := probe[ch.attempt.ID]
		if !ok {
			fails = append(fails, ch.what+": the probe did not report it")
			continue
		}
		var hits int64
		if ch.hits != nil {
			var all int64
			if hits, all = ch.hits(); all == 0 {
				fails = append(fails, ch.what+": the target's server counted nothing, not even the control, so its count of the probe's attempts proves nothing")
			}
		}
		switch {
		case c.allowed && !ch.reached(obs):
			fails = append(fails, fmt.Sprintf("%s did not reach the allowed target (%s)", ch.what, obs.short()))
		case !c.allowed && ch.reached(obs):
			fails = append(fails, fmt.Sprintf("%s reached the target (%s)", ch.what, obs.short()))
		case !c.allowed && hits > 0:
			fails = append(fails, fmt.Sprintf("%s reached the target: its server saw %s", ch.what, plural(int(hits), "attempt")))
		case !c.allowed && c.failFast && obs.TimedOut:
			fails = append(fails, fmt.Sprintf("%s hung until the probe gave up after %v (%s), instead of failing at once", ch.what, attemptTimeout, obs.short()))
		}
		if ch.extra != nil {
			if msg := ch.extra(obs); msg != "" {
				fails = append(fails, ch.what+": "+msg)
			}
		}
		if ch.note != nil {
			if n := ch.note(obs); n != "" {
				notes = append(notes, n)
			}
		}
	}
	if len(fails) > 0 {
		r.verdict, r.why = Fail, strings.Join(fails, "; ")
	} else if len(notes) > 0 {
		r.why = strings.Join(notes, "; ")
	}
	return r
}

// controlVantage says where ch's control was made from.
func controlVantage(ch caseCheck) string {
	if ch.controlNetns != "" {
		return "from " + ch.controlNetns
	}
	return "from the host"
}

// printResults writes one line per case (with verbose, what each attempt
// saw under it) and a summary, and returns the summary.
func printResults(w io.Writer, results []caseResult, verbose bool) Summary {
	for _, r := range results {
		printCase(w, r, verbose)
	}
	return printSummary(w, results)
}

// printCase writes r's line: PASS or FAIL (or SKIP), its name and why;
// with verbose, what each attempt and control saw, under it.
func printCase(w io.Writer, r caseResult, verbose bool) {
	switch {
	case r.verdict == Pass && r.why != "":
		fmt.Fprintf(w, "PASS %s (%s)\n", r.name, r.why)
	case r.verdict == Pass:
		fmt.Fprintf(w, "PASS %s\n", r.name)
	default:
		fmt.Fprintf(w, "%s %s: %s\n", r.verdict, r.name, r.why)
	}
	if verbose {
		for _, s := range r.seen {
			fmt.Fprintf(w, "    %s\n", s)
		}
	}
}

// printSummary writes the summary of results and returns it.
func printSummary(w io.Writer, results []caseResult) Summary {
	var sum Summary
	for _, r := range results {
		switch r.verdict {
		case Pass:
			sum.Passed++
		case Fail:
			sum.Failed++
		case Skip:
			sum.Skipped++
		}
	}
	line := fmt.Sprintf("%d passed, %d failed", sum.Passed, sum.Failed)
	if sum.Skipped > 0 {
		line += fmt.Sprintf(", %d skipped", sum.Skipped)
	}
	fmt.Fprintf(w, "selftest: %s of %s\n", line, plural(len(results), "case"))
	return sum
}

// plural returns "1 case", "2 cases".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// printable shows what came from a sandbox as what it holds
// (escape.Text), so that it cannot drive the terminal.
func printable(s string) string { return escape.Text(s) }

// errNoProbeReport is what a probe that reported nothing gets.
var errNoProbeReport = errors.New("the probe in the sandbox reported nothing")

// Judges of observations.

// hasSecret: the answer holds secret, which only the target's server
// sends.
func hasSecret(secret string) func(observation) bool {
	return func(o observation) bool { return secret != "" && strings.Contains(o.Data, secret) }
}

// hasAddr: a DNS answer gave addr, which only the target's server gives.
func hasAddr(addr string) func(observation) bool {
	return func(o observation) bool { return o.Answered && slices.Contains(o.Addrs, addr) }
}

// dnsAnswered: any DNS answer came back.
func dnsAnswered(o observation) bool { return o.Answered }

// echoed: an ICMP echo reply carrying the attempt's token came back.
func echoed(o observation) bool { return strings.HasPrefix(o.Data, "echo reply") }

// apiAnswered: the management API answered GET /healthz.
func apiAnswered(o observation) bool {
	return strings.HasPrefix(o.Data, "HTTP/1.1 200") && strings.HasSuffix(strings.TrimSpace(o.Data), "\nok")
}

// socketExists: the API's socket is there.
func socketExists(o observation) bool { return o.Exists }

// rawOpened: a raw socket opened.
func rawOpened(o observation) bool { return strings.HasPrefix(o.Data, "opened ") }

// Capabilities that would let a process build its own packets or change
// the network (capability(7) bit numbers).
var networkCapabilities = map[string]uint{"CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_SYS_ADMIN": 21}

// securityLoose: the process holds a capability of networkCapabilities,
// or runs without no_new_privs or without a seccomp filter. An
// observation that cannot be read counts as loose.
func securityLoose(o observation) bool { return looseness(o) != "" }

// looseness says what securityLoose found, "" when nothing.
func looseness(o observation) string {
	fields := map[string]string{}
	for f := range strings.FieldsSeq(o.Data) {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	capEff, err := strconv.ParseUint(fields["CapEff"], 16, 64)
	if err != nil {
		return fmt.Sprintf("unreadable status %q", o.Data)
	}
	var found []string
	for _, name := range slices.Sorted(maps.Keys(networkCapabilities)) {
		if capEff&(1<<networkCapabilities[name]) != 0 {
			found = append(found, name)
		}
	}
	if fields["NoNewPrivs"] != "1" {
		found = append(found, "no_new_privs unset")
	}
	if fields["Seccomp"] != "2" {
		found = append(found, "no seccomp filter")
	}
	return strings.Join(found, ", ")
}

// namespacesMade: the new namespaces were made.
func namespacesMade(o observation) bool { return o.Created }

// namespacesUsable: the new namespaces were made and give something to
// reach the network with: a link but loopback, or an answer holding
// secret.
func namespacesUsable(secret string) func(observation) bool {
	return func(o observation) bool {
		if !o.Created {
			return false
		}
		var r struct {
			Links []string `json:"links"`
			Data  string   `json:"data"`
		}
		if err := json.Unmarshal([]byte(o.Data), &r); err != nil {
			return true // a child that cannot say what it has is not known to have nothing
		}
		return strings.Contains(r.Data, secret) || slices.ContainsFunc(r.Links, func(l string) bool { return l != "lo" })
	}
}

// stubAnswered finds what is wrong with a DNS answer that must come from
// the gateway's stub (docs/capture.md): none at all, or an address that
// is neither a fake one (198.18.0.0/15) nor secret (judged as reached
// elsewhere).
func stubAnswered(secret string) func(observation) string {
	return func(o observation) string {
		if !o.Answered {
			return fmt.Sprintf("no answer (%s); with capture the gateway's DNS stub answers every query to port 53", o.short())
		}
		for _, a := range o.Addrs {
			if ip, err := netip.ParseAddr(a); a != secret && (err != nil || !fakeIPs.Contains(ip)) {
				return fmt.Sprintf("answered %s, not a fake address of the stub", a)
			}
		}
		return ""
	}
}

// fakeIPs are the addresses the DNS stub answers with (docs/capture.md).
var fakeIPs = netip.MustParsePrefix("198.18.0.0/15")

// resolvedToFake finds what is wrong with a connection by name whose
// name must resolve, through the stub, to a fake address.
func resolvedToFake(o observation) string {
	if len(o.Addrs) == 0 {
		return fmt.Sprintf("the name did not resolve through the sandbox's DNS stub (%s), so this case cannot tell", o.short())
	}
	if ip, err := netip.ParseAddr(o.Addrs[0]); err != nil || !fakeIPs.Contains(ip) {
		return fmt.Sprintf("the name resolved to %s, not a fake address of the stub", o.Addrs[0])
	}
	return ""
}
