package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/spf13/cobra"
	"github.com/vishvananda/netns"

	"github.com/sbx-dev/sbx/sandbox"
)

// Where selftest's sandboxes find sbx (bind-mounted read-only: /run is
// the sandbox's own tmpfs), and the directory they share as their working
// directory (--rootfs host shares one; this one is empty).
const (
	selftestExe     = "/run/sbx-selftest/sbx"
	selftestWorkDir = "/var/lib/sbx/selftest"
)

// Names the selftest's sandboxes reach by: the probed sandbox may reach
// reachName on portHTTP, the second one otherName on portOtherHTTP; both
// resolve (on the host, with --resolve) to the outside. exfilDomain is
// allowed to neither.
const (
	reachName   = "reach.selftest.test"
	otherName   = "other.selftest.test"
	exfilDomain = "exfil.selftest.test"
)

// How long the probe may take, and how long late packets are waited for
// after it ends.
const (
	probeDeadline = 90 * time.Second
	lateGrace     = 300 * time.Millisecond
)

// errInterrupted is selftest's error when Ctrl-C (or SIGTERM) stopped it.
var errInterrupted = errors.New("selftest interrupted; what it made is removed")

// runSelftest runs the escape catalogue and prints the results; it returns
// how many cases failed, or an error when it could not run.
func runSelftest(cmd *cobra.Command, o selftestOptions) (failed int, retErr error) {
	ctx := cmd.Context()
	defer func() {
		// Whatever failed when the context ended failed because of it.
		if retErr != nil && ctx.Err() != nil {
			retErr = errInterrupted
		}
	}()
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if os.Geteuid() != 0 {
		return 0, needsRoot("sbx selftest", "it makes sandboxes and a network namespace of its own")
	}
	if o.runtime != "" && o.runtime != runtimeContainerd && o.runtime != runtimeDocker {
		return 0, fmt.Errorf("--runtime %q: want %s or %s", o.runtime, runtimeContainerd, runtimeDocker)
	}
	rt, rtName, err := connectRuntime(ctx, runtimeOptions{name: o.runtime, socket: o.socket, dockerHost: o.dockerHost})
	if err != nil {
		return 0, fmt.Errorf("%w; selftest runs a sandbox: start containerd (or Docker), or name the runtime with --runtime", err)
	}
	rt.Close()
	o.runtime = rtName
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("finding sbx's own executable, which the probe runs: %w", err)
	}
	// The probe is sbx itself: bind-mounted read-only into --rootfs host,
	// or, with Docker, which runs images only, in an image of its own.
	common := []string{"--runtime", o.runtime, "--state-dir", o.stateDir, "--subnet-pool", o.subnetPool}
	probeExe := selftestExe
	switch o.runtime {
	case runtimeContainerd:
		common = append(common, "--containerd", o.socket, "-v", exe+":"+selftestExe+":ro")
	case runtimeDocker:
		ref, remove, err := loadProbeImage(ctx, o.dockerHost, exe)
		if err != nil {
			return 0, err
		}
		defer func() {
			if err := remove(); err != nil {
				retErr = multierror.Append(retErr, err)
			}
		}()
		probeExe = probeImageExe
		common = append(common, "--image", ref, "--pull", "never", "-e", "LD_LIBRARY_PATH="+probeImageLibDir)
		if o.dockerHost != "" {
			common = append(common, "--docker-host", o.dockerHost)
		}
	}
	logs, err := os.MkdirTemp("", "sbx-selftest-")
	if err != nil {
		return 0, err
	}
	defer func() {
		if failed > 0 || retErr != nil && ctx.Err() == nil {
			fmt.Fprintf(stderr, "sbx: the sandboxes' decision logs are kept in %s\n", logs)
			return
		}
		os.RemoveAll(logs)
	}()
	// sbx run's --rootfs host shares the working directory with the
	// sandbox: selftest's is an empty one of its own.
	if err := os.MkdirAll(selftestWorkDir, 0o700); err != nil {
		return 0, err
	}
	if prev, err := os.Getwd(); err == nil {
		defer os.Chdir(prev)
	}
	if err := os.Chdir(selftestWorkDir); err != nil {
		return 0, err
	}

	out, err := newSelftestOutside()
	if err != nil {
		return 0, fmt.Errorf("making the selftest's outside: %w", err)
	}
	defer func() {
		if err := out.Close(); err != nil {
			retErr = multierror.Append(retErr, err)
		}
	}()
	tag := randomHex(3)
	common = append(common, "--allow-private", out.addr.String()+"/32")
	other, err := startSelftestSandbox(ctx, o.stateDir, "selftest-"+tag+"-other", append(common,
		"--allow", fmt.Sprintf("%s:%d", otherName, portOtherHTTP), "--resolve", otherName+"="+out.addr.String(),
		"--log", filepath.Join(logs, "other.jsonl"), "--", probeExe, selftestProbeCommand, "--wait"))
	if err != nil {
		return 0, fmt.Errorf("starting the second sandbox: %w", err)
	}
	defer func() {
		if err := other.stop(); err != nil {
			retErr = multierror.Append(retErr, fmt.Errorf("the second sandbox: %w", err))
		}
	}()
	var results []caseResult
	for _, hostLayer := range []bool{false, true} {
		r := selftestRound{
			o: o, out: out, other: other.state, hostLayer: hostLayer, name: "selftest-" + tag,
			args: append(slices.Clip(common), "--", probeExe, selftestProbeCommand), logs: logs,
		}
		if hostLayer {
			r.name += "-host"
		}
		got, err := r.run(ctx, stderr)
		if err != nil {
			return 0, err
		}
		for _, c := range got {
			printCase(stdout, c, o.verbose)
		}
		results = append(results, got...)
	}
	return printSummary(stdout, results), nil
}

// selftestRound is one sandbox probed with the catalogue: as sbx run
// makes it, or (hostLayer) with its namespace's own rules flushed, so
// that only the host's rules for it stand (docs/network.md: what a
// process that rewrote them could do).
type selftestRound struct {
	o         selftestOptions
	out       *selftestOutside
	other     sandbox.State
	hostLayer bool
	name      string   // the sandbox's name
	args      []string // sbx run's: flags, --, the probe
	logs      string   // the directory of the decision logs
}

// run makes the round's sandbox and its targets, makes the controls,
// runs the probe and judges the cases; it takes the sandbox down.
func (r selftestRound) run(ctx context.Context, stderr io.Writer) (_ []caseResult, retErr error) {
	// The management API also listens on a TCP address of the host, one
	// that is not loopback: the outside's host end.
	apiAddr, err := freePort(r.out.host)
	if err != nil {
		return nil, err
	}
	flags := []string{"--allow", fmt.Sprintf("%s:%d", reachName, portHTTP), "--resolve", reachName + "=" + r.out.addr.String(),
		"--api", apiAddr.String(), "--log", filepath.Join(r.logs, r.name+".jsonl")}
	probed, err := startSelftestSandbox(ctx, r.o.stateDir, r.name, append(flags, r.args...))
	if err != nil {
		return nil, fmt.Errorf("starting the probed sandbox: %w", err)
	}
	defer func() {
		if err := probed.stop(); err != nil {
			retErr = multierror.Append(retErr, fmt.Errorf("the probed sandbox: %w", err))
		}
	}()
	layer := "as sbx run makes it"
	if r.hostLayer {
		layer = "with its namespace's rules flushed"
	}
	fmt.Fprintf(stderr, "sbx: selftest: probing from sandbox %s %s (runtime %s); the outside is %s, the second sandbox %s\n",
		probed.state.ID, layer, r.o.runtime, r.out.addr, r.other.ID)

	t, err := newSelftestTargets(r.out, probed.state, r.other, r.o.stateDir, apiAddr)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	if err := flushSandboxRules(ctx, probed.state.ID, r.hostLayer || r.o.flushRules, r.o.flushRules); err != nil {
		return nil, err
	}
	cases := selftestCatalogue(r.out, t, r.hostLayer)
	r.out.resetCounts() // what an earlier round saw is not this one's

	controls, err := runControls(ctx, cases)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err() // the controls were cut short
	}
	var plan probePlan
	for _, c := range cases {
		for _, ch := range c.checks {
			plan.Attempts = append(plan.Attempts, ch.attempt)
		}
	}
	r.out.probing.Store(true)
	report, err := probed.probe(ctx, plan)
	time.Sleep(lateGrace) // what is still on its way is counted too
	r.out.probing.Store(false)
	if err != nil {
		return nil, err
	}
	var results []caseResult
	for _, c := range cases {
		results = append(results, judgeCase(c, controls, report.Results))
	}
	return results, nil
}

// freePort returns addr with a port nothing listens on now.
func freePort(addr netip.Addr) (netip.AddrPort, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr.String(), "0"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("finding a free port on %s: %w", addr, err)
	}
	defer ln.Close()
	return netip.ParseAddrPort(ln.Addr().String())
}

// selftestSandbox is a sandbox started by startSelftestSandbox, through
// sbx run's own code, with its command's standard streams in hand.
type selftestSandbox struct {
	state  sandbox.State
	stdin  *os.File // the write end of the command's standard input
	stdout bytes.Buffer
	stderr lockedBuffer
	cancel context.CancelFunc
	done   chan struct{} // closed when sbx run has returned
	err    error         // what it returned
}

// lockedBuffer is a bytes.Buffer that several goroutines may use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startSelftestSandbox runs sbx run with args (flags, then -- and the
// command) under the name name, and returns once the sandbox runs. The
// command runs as root inside (the hardest case) with standard input
// attached. stop ends it.
func startSelftestSandbox(ctx context.Context, stateDir, name string, args []string) (_ *selftestSandbox, retErr error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	s := &selftestSandbox{stdin: w, cancel: cancel, done: make(chan struct{})}
	run := newRunCmd()
	run.SilenceErrors, run.SilenceUsage = true, true
	run.SetArgs(append([]string{"--quiet", "--name", name, "--user", "0", "-i"}, args...))
	run.SetIn(r)
	run.SetOut(&s.stdout)
	run.SetErr(&s.stderr)
	// Ends when the command ends, or soon after runCtx is cancelled
	// (sbx run stops the command then).
	go func() {
		s.err = run.ExecuteContext(runCtx)
		r.Close()
		close(s.done)
	}()
	defer func() {
		if retErr != nil {
			s.stop()
		}
	}()
	deadline := time.After(time.Minute)
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("sbx run ended before its sandbox ran: %v\n%s", s.err, s.stderr.String())
		case <-deadline:
			return nil, fmt.Errorf("sandbox %s did not start within a minute\n%s", name, s.stderr.String())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		st, err := sandbox.Find(stateDir, name)
		if errors.Is(err, sandbox.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if st.Status != sandbox.StatusRunning {
			continue
		}
		s.state = st
		return s, nil
	}
}

// probe sends the plan to the probe, waits for it to end and returns its
// report.
func (s *selftestSandbox) probe(ctx context.Context, plan probePlan) (probeReport, error) {
	err := json.NewEncoder(s.stdin).Encode(plan)
	s.stdin.Close()
	if err != nil {
		return probeReport{}, fmt.Errorf("sending the probe its plan: %w\n%s", err, s.stderr.String())
	}
	select {
	case <-s.done:
	case <-time.After(probeDeadline):
		s.cancel()
		<-s.done
		return probeReport{}, fmt.Errorf("the probe did not finish within %v\n%s", probeDeadline, s.stderr.String())
	case <-ctx.Done():
		return probeReport{}, ctx.Err()
	}
	var rep probeReport
	for line := range strings.SplitSeq(s.stdout.String(), "\n") {
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &rep) == nil && rep.Results != nil {
			return rep, nil
		}
	}
	return probeReport{}, fmt.Errorf("%w (sbx run: %v)\n%s%s", errNoProbeReport, s.err, s.stdout.String(), s.stderr.String())
}

// stop ends the command (its standard input closed; after 20 s, sbx run
// is cancelled, which stops it), waits for sbx run to take the sandbox
// down and returns sbx run's failure, if sbx itself failed.
func (s *selftestSandbox) stop() error {
	s.stdin.Close()
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.cancel()
		<-s.done
	}
	s.cancel()
	var ee *exitError
	if errors.As(s.err, &ee) && ee.code == exitSbxFailed {
		return fmt.Errorf("%w\n%s", s.err, s.stderr.String())
	}
	return nil
}

// selftestTargets are the targets besides the outside: the probed
// sandbox's gateway and API, and the second sandbox; with servers of
// selftest's own on the probed gateway's address and the second
// sandbox's.
type selftestTargets struct {
	probedGW, otherGW, otherAddr netip.Addr
	gatewayPort, otherPort       uint16
	otherNetns                   string
	apiSocket                    string
	apiAddr                      netip.AddrPort
	gwTCP, gwUDP                 netip.AddrPort // servers on the probed gateway's address
	gwTCPHits, gwUDPHits         *hitCounter
	otherHits                    *hitCounter // the server on the second sandbox's address
	closers                      []io.Closer
}

// newSelftestTargets opens selftest's servers on the probed sandbox's
// gateway address (a TCP and a UDP port that are not the gateway's) and
// on the second sandbox's address, in its namespace.
func newSelftestTargets(out *selftestOutside, probed, other sandbox.State, stateDir string, apiAddr netip.AddrPort) (_ *selftestTargets, retErr error) {
	t := &selftestTargets{
		probedGW: probed.Subnet.Addr().Next(), otherGW: other.Subnet.Addr().Next(), otherAddr: other.Subnet.Addr().Next().Next(),
		gatewayPort: probed.GatewayPort, otherPort: other.GatewayPort, otherNetns: "sbx-" + other.ID,
		apiSocket: filepath.Join(stateDir, probed.ID, "api.sock"), apiAddr: apiAddr,
		gwTCPHits: out.counter(), gwUDPHits: out.counter(), otherHits: out.counter(),
	}
	defer func() {
		if retErr != nil {
			t.Close()
		}
	}()
	ln, err := net.Listen("tcp4", net.JoinHostPort(t.probedGW.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("listening on the gateway's address: %w", err)
	}
	t.closers = append(t.closers, ln)
	t.gwTCP, _ = netip.ParseAddrPort(ln.Addr().String())
	go serveBanner(ln, out.secret, t.gwTCPHits)
	pc, err := net.ListenPacket("udp4", net.JoinHostPort(t.probedGW.String(), "0"))
	if err != nil {
		return nil, fmt.Errorf("listening on the gateway's address: %w", err)
	}
	t.closers = append(t.closers, pc)
	t.gwUDP, _ = netip.ParseAddrPort(pc.LocalAddr().String())
	go serveUDPSecret(pc, out.secret, t.gwUDPHits)

	ns, err := netns.GetFromName(t.otherNetns)
	if err != nil {
		return nil, fmt.Errorf("opening the second sandbox's namespace: %w", err)
	}
	defer ns.Close()
	var oln net.Listener
	if err := withNetns(ns, func() error {
		var err error
		oln, err = net.Listen("tcp4", net.JoinHostPort(t.otherAddr.String(), strconv.Itoa(portOther)))
		return err
	}); err != nil {
		return nil, fmt.Errorf("listening on the second sandbox's address: %w", err)
	}
	t.closers = append(t.closers, oln)
	go serveBanner(oln, out.secret, t.otherHits)
	return t, nil
}

// Close closes the servers.
func (t *selftestTargets) Close() {
	for _, c := range t.closers {
		c.Close()
	}
}

// runControls makes every check's control, from the host or from the
// namespace it names, and returns what each saw by attempt id.
func runControls(ctx context.Context, cases []selftestCase) (map[string]observation, error) {
	results := map[string]observation{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs *multierror.Error
	for _, c := range cases {
		if c.skip != "" {
			continue
		}
		for _, ch := range c.checks {
			a := ch.control
			if a.Kind == "" {
				a = ch.attempt
			}
			// Ends when the attempt does, within attemptTimeout.
			wg.Go(func() {
				var o observation
				var err error
				if ch.controlNetns == "" {
					o = runAttempt(ctx, a)
				} else {
					err = inNamedNetns(ch.controlNetns, func() error { o = runAttempt(ctx, a); return nil })
				}
				mu.Lock()
				defer mu.Unlock()
				results[ch.attempt.ID] = o
				if err != nil {
					errs = multierror.Append(errs, fmt.Errorf("control of %s: %w", ch.what, err))
				}
			})
		}
	}
	wg.Wait()
	return results, errs.ErrorOrNil()
}

// inNamedNetns runs fn on a thread switched into network namespace name.
func inNamedNetns(name string, fn func() error) error {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	return withNetns(ns, fn)
}

// flushSandboxRules takes the rules of sandbox id away: inside its
// namespace (every chain accepts, nothing is redirected), and on the host
// (its chains emptied), as asked.
func flushSandboxRules(ctx context.Context, id string, inside, onHost bool) error {
	n, err := sandbox.NamesFor(id)
	if err != nil {
		return err
	}
	const open = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
	const openNAT = "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n"
	type step struct {
		stdin string
		args  []string
	}
	var steps []step
	if inside {
		steps = append(steps,
			step{open + openNAT, []string{"ip", "netns", "exec", n.Netns, "iptables-restore", "-w"}},
			step{open, []string{"ip", "netns", "exec", n.Netns, "ip6tables-restore", "-w"}})
	}
	if onHost {
		steps = append(steps,
			step{"", []string{"iptables", "-w", "-F", n.ChainIn}},
			step{"", []string{"iptables", "-w", "-F", n.ChainFwd}},
			step{"", []string{"ip6tables", "-w", "-F", n.ChainIn}})
	}
	for _, c := range steps {
		cmd := exec.CommandContext(ctx, c.args[0], c.args[1:]...)
		cmd.Stdin = strings.NewReader(c.stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("flushing sandbox %s's rules: %s: %w: %s", id, strings.Join(c.args, " "), err, out)
		}
	}
	return nil
}
