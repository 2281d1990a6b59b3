package selftest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/vishvananda/netns"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// Where the sandboxes find the probe (bind-mounted read-only: /run is
// the sandbox's own tmpfs), and the directory they share as their working
// directory (the host's layout shares one; this one is empty).
const (
	probeMount = "/run/sbx-selftest/sbx"
	workDir    = "/var/lib/sbx/selftest"
)

// Names the sandboxes reach by: the probed sandbox may reach reachName
// on portHTTP, the second one otherName on portOtherHTTP; both resolve
// (on the host) to the outside. exfilDomain is allowed to neither.
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

// Run makes the outside and a second sandbox, probes two sandboxes made
// as sbx run makes them (capture on, the command root inside) with the
// escape catalogue, the second with its namespace's rules flushed, and
// writes to w a line per case as each round ends and a summary. It
// returns the summary, or an error when it could not run the catalogue
// (ErrInterrupted when ctx ended first) or take down what it made. It
// removes everything it made, when ctx ends too; after a failure it
// keeps the decision logs, and says where in a LogsKept note. It needs
// root.
func Run(ctx context.Context, o Options, w io.Writer) (_ Summary, retErr error) {
	defer func() {
		// Whatever failed when the context ended failed because of it.
		if retErr != nil && ctx.Err() != nil {
			retErr = ErrInterrupted
		}
	}()
	if o.Runtime == nil || o.ProbeExe == "" {
		return Summary{}, errors.New("selftest: Options.Runtime and Options.ProbeExe are required")
	}
	if o.StateDir == "" {
		o.StateDir = sandbox.DefaultStateDir
	}
	if o.Notes == nil {
		o.Notes = func(Note) {}
	}
	s, err := newSession(ctx, o)
	if err != nil {
		return Summary{}, err
	}
	var sum Summary
	defer func() {
		if err := s.close(ctx, sum.Failed > 0, retErr); err != nil {
			retErr = multierror.Append(retErr, err)
		}
	}()
	var results []caseResult
	for _, hostLayer := range []bool{false, true} {
		got, err := s.round(ctx, hostLayer)
		if err != nil {
			return Summary{}, err
		}
		for _, c := range got {
			printCase(w, c, o.Verbose)
		}
		results = append(results, got...)
	}
	sum = printSummary(w, results)
	return sum, nil
}

// session is what a run's rounds share: the probe's root filesystem,
// the decision logs' directory, the outside and the second sandbox.
type session struct {
	o      Options
	rootFS run.Spec // the probe's root filesystem: RootFS, Volumes, Env
	probe  string   // the probe's path in the sandboxes
	tag    string   // in the sandboxes' names
	logs   string   // the directory of the decision logs
	out    *outside
	other  *probeSandbox
	// removeImage, when set, removes the probe's image.
	removeImage func() error
}

// newSession readies the probe, the logs' directory and the sandboxes'
// working directory, and makes the outside and the second sandbox. On
// error what it made is removed.
func newSession(ctx context.Context, o Options) (_ *session, retErr error) {
	s := &session{o: o, tag: randomHex(3)}
	defer func() {
		if retErr != nil {
			if err := s.close(ctx, false, retErr); err != nil {
				retErr = multierror.Append(retErr, err)
			}
		}
	}()
	if err := s.readyProbe(ctx); err != nil {
		return nil, err
	}
	logs, err := os.MkdirTemp(o.LogDir, "sbx-selftest-")
	if err != nil {
		return nil, err
	}
	s.logs = logs
	// The host's layout shares its working directory with the sandbox:
	// the selftest's is an empty one of its own.
	if err := os.MkdirAll(workDir, 0o700); err != nil {
		return nil, err
	}
	if s.out, err = newOutside(); err != nil {
		return nil, fmt.Errorf("making the selftest's outside: %w", err)
	}
	spec, err := s.spec("selftest-"+s.tag+"-other", otherName, portOtherHTTP, "other.jsonl", ProbeCommand, "--"+ProbeWait)
	if err != nil {
		return nil, err
	}
	if s.other, err = startSandbox(ctx, spec, o.StateDir); err != nil {
		return nil, fmt.Errorf("starting the second sandbox: %w", err)
	}
	return s, nil
}

// readyProbe says how the sandboxes run the probe: with Docker, which
// runs images only, from an image of its own, loaded now; else
// bind-mounted read-only into the host's layout.
func (s *session) readyProbe(ctx context.Context) error {
	if _, ok := s.o.Runtime.(*sandbox.Docker); !ok {
		s.probe = probeMount
		s.rootFS.Volumes = []rootfs.Mount{{Destination: probeMount, Source: s.o.ProbeExe, Type: "bind", Options: rootfs.ReadOnlyBind}}
		return nil
	}
	ref, remove, err := loadProbeImage(ctx, s.o.DockerHost, s.o.ProbeExe)
	if err != nil {
		return err
	}
	s.probe, s.removeImage = probeImageExe, remove
	s.rootFS.RootFS = run.RootFS{Image: ref, Pull: sandbox.PullNever}
	s.rootFS.Env = []string{"LD_LIBRARY_PATH=" + probeImageLibDir}
	return nil
}

// close takes down what s made, in reverse, and returns every failure.
// The decision logs are kept, and said to be, when a case failed or the
// run failed (runErr) other than by ctx's end.
func (s *session) close(ctx context.Context, failed bool, runErr error) error {
	var errs *multierror.Error
	if s.other != nil {
		if err := s.other.stop(); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("the second sandbox: %w", err))
		}
	}
	if s.out != nil {
		errs = multierror.Append(errs, s.out.Close())
	}
	if s.logs != "" {
		if failed || (runErr != nil || errs.ErrorOrNil() != nil) && ctx.Err() == nil {
			s.o.Notes(LogsKept{Dir: s.logs})
		} else {
			os.RemoveAll(s.logs)
		}
	}
	if s.removeImage != nil {
		errs = multierror.Append(errs, s.removeImage())
	}
	return errs.ErrorOrNil()
}

// spec is the run.Spec of a sandbox named name that may reach allowName
// on allowPort (which resolves to the outside) and the outside's address
// otherwise only as the policy allows, keeps its decision log in the
// file log of the logs' directory, and runs the probe with args: as sbx
// run makes one, with capture, its command root inside (the hardest
// case) and its standard input attached.
func (s *session) spec(name, allowName string, allowPort int, log string, args ...string) (run.Spec, error) {
	rules, err := netpolicy.FlagPatterns{Allow: []string{fmt.Sprintf("%s:%d", allowName, allowPort)}}.Rules()
	if err != nil {
		return run.Spec{}, err
	}
	policy, err := netpolicy.Compile(netpolicy.Spec{Rules: rules, AllowPrivate: []netip.Prefix{netip.PrefixFrom(s.out.addr, 32)}})
	if err != nil {
		return run.Spec{}, err
	}
	resolver := &gateway.Resolver{}
	if err := resolver.AddStatic(allowName, s.out.addr); err != nil {
		return run.Spec{}, err
	}
	return run.Spec{
		Command:  append([]string{s.probe}, args...),
		Name:     name,
		Gateway:  gateway.Config{Policy: policy, Resolver: resolver, LogFile: filepath.Join(s.logs, log)},
		LogDir:   s.logs, // its records too: the selftest's sandboxes are not the user's, for sbx ps -a
		RootFS:   s.rootFS.RootFS,
		Volumes:  s.rootFS.Volumes,
		Env:      s.rootFS.Env,
		Cwd:      workDir,
		User:     &run.User{UID: 0, GID: 0, Why: run.UserAsked},
		Limits:   sandbox.DefaultLimits(),
		Runtime:  s.o.Runtime,
		Pool:     s.o.Pool,
		StateDir: s.o.StateDir,
		Capture:  true,
	}, nil
}

// round probes one sandbox with the catalogue: as sbx run makes it, or
// (hostLayer) with its namespace's own rules flushed, so that only the
// host's rules for it stand (docs/network.md: what a process that
// rewrote them could do). It makes the sandbox and its targets, makes
// the controls, runs the probe and judges the cases; it takes the
// sandbox down.
func (s *session) round(ctx context.Context, hostLayer bool) (_ []caseResult, retErr error) {
	name := "selftest-" + s.tag
	if hostLayer {
		name += "-host"
	}
	// The management API also listens on a TCP address of the host, one
	// that is not loopback: the outside's host end.
	apiAddr, err := freePort(s.out.host)
	if err != nil {
		return nil, err
	}
	spec, err := s.spec(name, reachName, portHTTP, name+".jsonl", ProbeCommand)
	if err != nil {
		return nil, err
	}
	spec.Gateway.API = []string{apiAddr.String()}
	probed, err := startSandbox(ctx, spec, s.o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("starting the probed sandbox: %w", err)
	}
	defer func() {
		if err := probed.stop(); err != nil {
			retErr = multierror.Append(retErr, fmt.Errorf("the probed sandbox: %w", err))
		}
	}()
	s.o.Notes(Probing{ID: probed.state.ID, HostLayer: hostLayer, Outside: s.out.addr, Other: s.other.state.ID})
	t, err := newTargets(s.out, probed.state, s.other.state, s.o.StateDir, apiAddr)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	if err := flushSandboxRules(ctx, probed.state.ID, hostLayer || s.o.FlushRules, s.o.FlushRules); err != nil {
		return nil, err
	}
	return s.probeAndJudge(ctx, probed, catalogue(s.out, t, hostLayer))
}

// probeAndJudge makes the cases' controls, runs the probe in probed and
// judges the cases.
func (s *session) probeAndJudge(ctx context.Context, probed *probeSandbox, cases []testCase) ([]caseResult, error) {
	s.out.resetCounts() // what an earlier round saw is not this one's
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
	s.out.probing.Store(true)
	report, err := probed.probe(ctx, plan)
	time.Sleep(lateGrace) // what is still on its way is counted too
	s.out.probing.Store(false)
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

// probeSandbox is a sandbox started by startSandbox, through the run
// library, with its command's standard streams in hand.
type probeSandbox struct {
	state  sandbox.State
	stdin  *os.File // the write end of the command's standard input
	stdout bytes.Buffer
	stderr lockedBuffer
	cancel context.CancelFunc
	done   chan struct{} // closed when the sandbox is down
	err    error         // the run's failure, set before done is closed
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

// startTimeout bounds the start of a sandbox.
const startTimeout = time.Minute

// startSandbox starts spec's sandbox, with its standard streams in the
// returned probeSandbox, and returns once its command runs. stop ends
// it.
func startSandbox(ctx context.Context, spec run.Spec, stateDir string) (_ *probeSandbox, retErr error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	s := &probeSandbox{stdin: w, cancel: cancel, done: make(chan struct{})}
	spec.Stdin, spec.Stdout, spec.Stderr = r, &s.stdout, &s.stderr
	// The gateway's warnings are shown with a failure.
	spec.Gateway.Logger = slog.New(slog.NewTextHandler(&s.stderr, nil))
	slow := time.AfterFunc(startTimeout, cancel)
	rn, err := run.Start(runCtx, spec)
	if late := !slow.Stop(); err != nil || late {
		if err == nil {
			rn.Close() // started, but as it was being given up
		}
		cancel()
		r.Close()
		w.Close()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case late:
			return nil, fmt.Errorf("sandbox %s did not start within %v\n%s", spec.Name, startTimeout, s.stderr.String())
		}
		return nil, fmt.Errorf("the sandbox did not start: %w\n%s", err, s.stderr.String())
	}
	// Ends when the command ends, or soon after runCtx is cancelled
	// (which stops the command).
	go s.supervise(runCtx, rn, r)
	defer func() {
		if retErr != nil {
			s.stop()
		}
	}()
	if s.state, err = sandbox.Find(stateDir, rn.ID()); err != nil {
		return nil, err
	}
	return s, nil
}

// supervise waits for the command's end, or ctx's (then stops the
// command), takes the sandbox down, which drains the command's output,
// and closes stdin, the read end of its input. It sets s.err to what
// failed, and closes s.done.
func (s *probeSandbox) supervise(ctx context.Context, r *run.Run, stdin *os.File) {
	defer close(s.done)
	var errs *multierror.Error
	// The command's own exit code is no failure of the sandbox's.
	_, err := r.Wait(ctx)
	if ctx.Err() != nil && err == ctx.Err() {
		_, err = r.Stop(10 * time.Second)
	}
	errs = multierror.Append(errs, err, r.Close())
	stdin.Close()
	s.err = errs.ErrorOrNil()
}

// probe sends the plan to the probe, waits for it to end and returns its
// report.
func (s *probeSandbox) probe(ctx context.Context, plan probePlan) (probeReport, error) {
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
	return probeReport{}, fmt.Errorf("%w (the sandbox: %v)\n%s%s", errNoProbeReport, s.err, s.stdout.String(), s.stderr.String())
}

// stop ends the command (its standard input closed; after 20 s, its
// context is cancelled, which stops it), waits for the sandbox to be
// taken down and returns what failed, if the sandbox's run failed.
func (s *probeSandbox) stop() error {
	s.stdin.Close()
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.cancel()
		<-s.done
	}
	s.cancel()
	if s.err != nil {
		return fmt.Errorf("%w\n%s", s.err, s.stderr.String())
	}
	return nil
}

// targets are the targets besides the outside: the probed
// sandbox's gateway and API, and the second sandbox; with servers of
// selftest's own on the probed gateway's address and the second
// sandbox's.
type targets struct {
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

// newTargets opens selftest's servers on the probed sandbox's
// gateway address (a TCP and a UDP port that are not the gateway's) and
// on the second sandbox's address, in its namespace.
func newTargets(out *outside, probed, other sandbox.State, stateDir string, apiAddr netip.AddrPort) (_ *targets, retErr error) {
	t := &targets{
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
func (t *targets) Close() {
	for _, c := range t.closers {
		c.Close()
	}
}

// runControls makes every check's control, from the host or from the
// namespace it names, and returns what each saw by attempt id.
func runControls(ctx context.Context, cases []testCase) (map[string]observation, error) {
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
