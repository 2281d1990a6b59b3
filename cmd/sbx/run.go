package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// Where sbx run keeps a sandbox's record and logs (docs/cli.md). A
// variable only so that the tests (and the binaries they build, with -X)
// keep theirs apart from the machine's.
var logRoot = run.DefaultLogDir

// hostRoot is the skeleton root of --rootfs host.
const hostRoot = run.DefaultHostRoot

// exitSbxFailed is sbx run's exit code when sbx itself fails (docs/cli.md).
const exitSbxFailed = 125

// runOptions are the flags of sbx run: those it shares with sbx gateway
// (gatewayFlags), and its own.
type runOptions struct {
	gatewayFlags
	rootfs     string
	image      string
	pull       string
	env        []string
	volumes    []string
	workdir    string
	user       string
	tty        bool
	stdin      bool
	quiet      bool // --show none
	show       string
	name       string
	runtime    string
	dockerHost string // hidden: for tests
	subnetPool string
	stateDir   string // hidden: for tests
	socket     string
	capAdd     []string
	memory     string
	cpus       float64
	pidsLimit  int64
	tmpSize    string
	home       string
	agent      string
	login      string
	homeDir    string // hidden: for tests
	noCapture  bool
	noPrompt   bool
}

func newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox whose only way out is the gateway",
		Long: `Run starts COMMAND in a new sandbox: a container in a network namespace
whose only way out is a gateway on the host that decides every request by
the policy flags and logs every decision. The command finds the gateway in
HTTP_PROXY and HTTPS_PROXY; anything that ignores them reaches nothing.

Decisions are printed on stderr as they happen (--show says which) and
kept in /var/lib/sbx/sandboxes/<id>/decisions.jsonl (or --log), whose path
is printed at the end. Rules can be changed while it runs with sbx policy
... --sandbox <id>, through the API socket in /run/sbx/<id>/.

When the policy asks (action ask, --default ask), the question comes up on
sbx's terminal and one key answers it; the command's output is held while
it is on the screen. With --no-prompt, -t, or no terminal, a line on
stderr names the sbx approve command that answers it instead.

The command never runs as root on the host unless --user 0 says so: under
sudo it runs as the user who ran sudo, with --rootfs host as the owner of
the working directory, and otherwise as nobody (65534). It has no
capability that reaches beyond the sandbox (--cap-add gives one back), and
its memory, CPU time and processes are limited (see the defaults below).

Exit code: COMMAND's; 125 when sbx itself fails, 126 when COMMAND cannot be
executed, 127 when it is not found. Needs root, iptables, and containerd
or Docker (--runtime docker runs images from Docker's store, --image).`,
		Example: `  # A busybox root filesystem, the npm registry allowed, everything else blocked.
  sbx run --rootfs ./rootfs --allow registry.npmjs.org -- wget -q -O- https://registry.npmjs.org/

  # Test against a server of your own under a fake name.
  sbx run --rootfs ./rootfs --allow api.test:8080 --resolve api.test=10.0.0.5 --allow-private 10.0.0.5/32 -- sh

  # An image from Docker's store, with Docker's network replaced by sbx's.
  sbx run --runtime docker --image node:22 --allow registry.npmjs.org -- npm ci`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf(cmd, "no command given; write sbx run [flags] -- COMMAND [ARG...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// Bad flag values exit 2, before root is asked for; sbx's
			// own failures 125 (runflags.go).
			if err := o.check(cmd); err != nil {
				return err
			}
			code, err := runSandbox(cmd, o, args)
			if err != nil {
				return runError(err)
			}
			if code != 0 {
				return &exitError{code: code, err: errSilent}
			}
			return nil
		},
	}
	o.addFlags(cmd.Flags())
	cmd.Flags().SetInterspersed(false)
	return cmd
}

// addFlags defines sbx run's flags in fs.
func (o *runOptions) addFlags(fs *pflag.FlagSet) {
	o.gatewayFlags.addFlags(fs, gatewayFlagUsage{
		log:         "keep the decision log in `FILE` (default /var/lib/sbx/sandboxes/<id>/decisions.jsonl)",
		api:         "also serve the management API on `ADDR` (host:port), besides /run/sbx/<id>/api.sock; repeatable",
		mockLLM:     mockLLMUsage,
		recordLLM:   recordLLMUsage,
		mockJournal: "keep the mock LLMs' journal (what the agent sent, bodies included; JSON Lines) in `FILE` (default beside the decision log: /var/lib/sbx/sandboxes/<id>/mock-requests.jsonl, which sbx mock requests --sandbox ID reads after the sandbox ended)",
	})
	fs.StringVar(&o.rootfs, "rootfs", "host", "the container's root filesystem: host (the host's system directories, read-only, secrets masked, the working directory read-write) or a `DIR` (read-only)")
	fs.StringVar(&o.image, "image", "", "run from the image `REF`, in containerd's sbx namespace or, with --runtime docker, Docker's store; pulled by --pull (instead of --rootfs)")
	fs.StringVar(&o.pull, "pull", "missing", "`WHEN` to pull --image from its registry into the runtime's store: never (sbx image import, or docker load, loads archives), missing, or always")
	fs.StringArrayVarP(&o.env, "env", "e", nil, "set `KEY=VAL` in the command's environment; repeatable")
	fs.StringArrayVarP(&o.volumes, "volume", "v", nil, "bind-mount `SRC:DST[:ro]` (SRC a host path, DST absolute); repeatable")
	fs.StringVarP(&o.workdir, "workdir", "w", "", "the command's working `DIR` inside the sandbox")
	fs.StringVar(&o.user, "user", "", "run as `UID[:GID]` (0 is host root: only when you mean it; default: the sudo user, the working directory's owner, or nobody)")
	def := sandbox.DefaultLimits()
	fs.StringVar(&o.memory, "memory", "", fmt.Sprintf("limit memory to `BYTES`, e.g. 2g or 512m; 0 for no limit (default: half of this machine's, %s)", formatBytes(def.Memory)))
	fs.Float64Var(&o.cpus, "cpus", def.CPUs, "limit CPU time to `N` CPUs, e.g. 1.5; 0 for no limit (default: all but one)")
	fs.Int64Var(&o.pidsLimit, "pids-limit", def.Pids, "limit processes and threads to `N`; 0 for no limit")
	fs.StringVar(&o.tmpSize, "tmp-size", formatBytes(rootfs.DefaultTmpSize), "with --rootfs host: the size of /tmp and of HOME, each (`BYTES`)")
	homeFlags(fs, &o.home, &o.agent, &o.homeDir)
	loginFlag(fs, &o.login)
	fs.StringArrayVar(&o.capAdd, "cap-add", nil, "give the command back `CAP`, one of "+strings.Join(sandbox.DroppedCapabilities, ", ")+" (never CAP_NET_ADMIN); repeatable")
	fs.BoolVarP(&o.tty, "tty", "t", false, "give the command a terminal")
	fs.BoolVarP(&o.stdin, "interactive", "i", false, "attach sbx's standard input to the command's")
	fs.StringVar(&o.show, "show", "all", "`WHAT` to print on stderr as it happens: all (every decision), blocks (refusals and errors: what may need you) or none (only where the log is)")
	fs.BoolVar(&o.quiet, "quiet", false, "print nothing as it happens: the same as --show none")
	fs.BoolVar(&o.noPrompt, "no-prompt", false, "ask no question on the terminal: questions (action ask) get a live line on stderr naming sbx approve, as with -t or without a terminal")
	fs.BoolVar(&o.noCapture, "no-capture", false, "leave the proxy port the only way out: DNS, connections that ignore HTTP_PROXY and other packets fail unseen instead of being decided and logged")
	fs.StringVar(&o.name, "name", "", "a `NAME` for the sandbox, unique among the running ones: shown by sbx ps, and taken wherever an id is")
	fs.StringVar(&o.runtime, "runtime", "", "the container `RUNTIME`: containerd, or docker (images only, --image) (default: containerd when its socket answers, else docker)")
	fs.StringVar(&o.subnetPool, "subnet-pool", sandbox.DefaultPool.String(), "take the sandbox's /30 from `CIDR`")
	fs.StringVar(&o.stateDir, "state-dir", sandbox.DefaultStateDir, "where running sandboxes are recorded")
	fs.StringVar(&o.socket, "containerd", sandbox.DefaultContainerdSocket, "containerd's `SOCKET`")
	fs.StringVar(&o.dockerHost, "docker-host", "", "Docker's `ADDRESS` (default: DOCKER_HOST, or Docker's own default)")
	fs.MarkHidden("state-dir")
	fs.MarkHidden("docker-host")
}

// dockerNeedsImage refuses what the docker runtime cannot run: a root
// filesystem that is not an image.
func dockerNeedsImage(cmd *cobra.Command, o runOptions) error {
	if o.image != "" {
		return nil
	}
	if cmd.Flags().Changed("rootfs") {
		return fmt.Errorf("--rootfs %s with --runtime docker: Docker runs images from its store only (give --image REF), as it cannot bind the host's directories read-only all the way down; use --runtime containerd for --rootfs", o.rootfs)
	}
	return errors.New("--runtime docker runs images from Docker's store only: give --image REF (docker images lists them), or use --runtime containerd for --rootfs host")
}

// errSilent carries an exit code without a message: the command's own
// failure, which it has reported itself.
var errSilent = errors.New("")

// runSandbox makes the sandbox, runs args in it, and takes it down. It
// returns the command's exit code, or an error when sbx failed.
func runSandbox(cmd *cobra.Command, o runOptions, args []string) (code int, retErr error) {
	ctx := cmd.Context()
	// The command's standard error, the live decision lines and sbx's own
	// messages come from different goroutines.
	stderr := &lockedWriter{w: cmd.ErrOrStderr()}
	if os.Geteuid() != 0 {
		return 0, needsRoot("sbx run", "namespaces, iptables, containerd or Docker")
	}
	// The start allocates a few megabytes and keeps little: no collection
	// while it runs (startGC), nor while a short command runs and the
	// sandbox is taken down, until the trim idleTrimAfter after the start
	// (trimIdleMemory; idlemem.go), which collects and gives back to the
	// system what the start freed. Set back last (the defers run in
	// reverse): at the latest once Close returns.
	endStartGC := startGC()
	endGC := endStartGC
	defer func() { endGC() }()
	// The sandbox's CA and its Java truststore are made while sbx waits
	// for the runtime's answers.
	run.PrepareStart()
	spec, err := o.sandboxSpec(cmd, args, stderr)
	if err != nil {
		return 0, err
	}
	rt, rtName, err := o.connectRuntime(cmd)
	if err != nil {
		return 0, err
	}
	defer rt.Close()
	spec.Runtime = rt
	if err := o.readConfig(cmd, &spec); err != nil {
		return 0, err
	}
	if !o.silent() {
		loginHostsNote(stderr, o.login, spec.Gateway.Policy)
	}
	// Questions asked on the terminal (prompt.go), when there is one the
	// command does not own.
	prompt := o.newRunPrompt(cmd.InOrStdin())
	if prompt != nil {
		prompt.attach(&spec, cmd.OutOrStdout(), cmd.ErrOrStderr(), stderr)
	} else if !o.tty {
		// No question on the terminal, but sbx's lines are there.
		guardTerminal(newTTYGate(), &spec, cmd.OutOrStdout(), cmd.ErrOrStderr(), stderr)
	}
	r, err := run.Start(ctx, spec)
	if err != nil {
		if prompt != nil {
			prompt.stop()
		}
		return o.startFailed(err, args[0], rtName, stderr)
	}
	endGC = trimIdleMemory(endStartGC)
	// Close says where the decision log is, after the command's output
	// (which the container's removal drains), then writes the recordings,
	// once the gateway is gone, so that every exchange is in.
	defer func() {
		if err := r.Close(); err != nil {
			retErr = multierror.Append(retErr, recordingErrors(err))
		}
	}()
	if !o.silent() {
		fmt.Fprintf(stderr, "sbx: sandbox %s, gateway %s\n", r.ID(), r.Proxy())
	}
	if prompt != nil {
		// Ended before Close: the prompt on the screen says the run
		// ended, and the output it held reaches the terminal.
		prompt.start(o.stateDir, r.ID())
		defer prompt.stop()
	}
	// Ctrl-C or SIGTERM: the command gets SIGTERM, and SIGKILL after 10 s.
	code, err = r.Wait(ctx)
	if ctx.Err() != nil && err == ctx.Err() {
		code, err = r.Stop(10 * time.Second)
	}
	return code, err
}

// connectRuntime connects to the runtime the flags name (the lease the
// container is made under is made meanwhile) and, for Docker, checks
// that it has the image.
func (o runOptions) connectRuntime(cmd *cobra.Command) (connectedRuntime, string, error) {
	rt, rtName, err := connectRuntime(cmd.Context(), runtimeOptions{name: o.runtime, socket: o.socket, dockerHost: o.dockerHost, create: true})
	if err != nil {
		return nil, "", err
	}
	if rtName == runtimeDocker {
		if err := dockerNeedsImage(cmd, o); err != nil {
			rt.Close()
			return nil, "", fmt.Errorf("containerd does not answer at %s, so the runtime is docker: %w", o.socket, err)
		}
	}
	return rt, rtName, nil
}

// showLevel is the level of live lines the flags ask for: --show's, or
// none with --quiet. check has refused a value that is neither.
func (o runOptions) showLevel() showLevel {
	if o.quiet {
		return showNone
	}
	l, _ := parseShow(o.show)
	return l
}

// silent says the flags ask for no live lines (--show none, --quiet),
// and for none of the run's notes but where the log is and what was
// recorded.
func (o runOptions) silent() bool {
	return o.showLevel() == showNone
}

// sandboxSpec maps the flags that need no runtime and read no file to
// the run library's Spec; the notes of the run go to stderr.
func (o runOptions) sandboxSpec(cmd *cobra.Command, args []string, stderr io.Writer) (run.Spec, error) {
	limits, tmpSize, err := o.limits()
	if err != nil {
		return run.Spec{}, err
	}
	capAdd, err := parseCaps(o.capAdd)
	if err != nil {
		return run.Spec{}, err
	}
	gw, err := o.gatewayFlags.config()
	if err != nil {
		return run.Spec{}, err
	}
	// Its warnings (a listener that fails to accept, a failed look at
	// this host's addresses) reach the user.
	gw.Logger = newLineLogger(stderr, "gateway: ")
	pull, err := sandbox.ParsePullPolicy(o.pull)
	if err != nil {
		return run.Spec{}, fmt.Errorf("--pull %q: want never, missing or always", o.pull)
	}
	pool, err := netip.ParsePrefix(o.subnetPool)
	if err != nil {
		return run.Spec{}, fmt.Errorf("--subnet-pool %q is not a CIDR; write e.g. 10.213.0.0/16", o.subnetPool)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return run.Spec{}, err
	}
	home, err := o.homeAndLogin(cmd, stderr)
	if err != nil {
		return run.Spec{}, err
	}
	spec := run.Spec{
		Command:  args,
		Name:     o.name,
		RootFS:   run.RootFS{Image: o.image, Pull: pull, HostRoot: hostRoot, TmpSize: tmpSize, Home: home, Agent: o.agent, HomeDir: o.homeDir, Login: o.login},
		Env:      o.env,
		Cwd:      cwd,
		Workdir:  o.workdir,
		CapAdd:   capAdd,
		Limits:   limits,
		TTY:      o.tty,
		Stdout:   cmd.OutOrStdout(),
		Stderr:   stderr,
		Gateway:  gw,
		LogDir:   logRoot,
		Pool:     pool,
		StateDir: o.stateDir,
		Capture:  !o.noCapture,
		Notes:    runNotes(stderr, o.silent(), o.image == "" && o.rootfs == "host", cwd, capAdd),
	}
	if o.image == "" && o.rootfs != "host" {
		spec.RootFS.Dir = o.rootfs
	}
	// Refused when the sandbox or another user could change it
	// (policyFileProblem).
	spec.PolicyFile = o.policy.Policy
	if !o.silent() && isTerminal(cmd.ErrOrStderr()) {
		spec.RootFS.PullProgress = cmd.ErrOrStderr()
	}
	if spec.User, err = userFlag(o.user); err != nil {
		return run.Spec{}, err
	}
	for _, v := range o.volumes {
		m, err := parseVolume(v)
		if err != nil {
			return run.Spec{}, err
		}
		spec.Volumes = append(spec.Volumes, m)
	}
	if !o.silent() {
		// With -t the command owns the terminal: only questions get a
		// line, naming the command that answers them.
		spec.Gateway.Sinks = append(spec.Gateway.Sinks, &liveSink{w: stderr, show: o.showLevel(), onlyQuestions: o.tty})
	}
	if o.stdin {
		spec.Stdin = cmd.InOrStdin()
	}
	return spec, nil
}

// readConfig reads what the flags name into spec: the policy and the LLM
// scripts it names, the mocks and recordings, the resolver's settings,
// the upstreams' CA.
func (o runOptions) readConfig(cmd *cobra.Command, spec *run.Spec) error {
	if o.agent != "" && len(o.mockLLM) == 0 {
		o.policy.Implied = agentLoginRules(o.agent, o.login == o.agent)
	}
	recordings, err := o.read(cmd, &spec.Gateway)
	spec.Recordings = recordings
	if err == nil && o.agent != "" && !o.silent() {
		mocked := len(spec.Gateway.MockLLM) > 0 || len(spec.Gateway.LLMScripts) > 0
		fmt.Fprintln(cmd.ErrOrStderr(), "sbx: "+agentNote(o.agent, o.policy.Implied, mocked))
	}
	return err
}

// runNotes returns the function that says the run's notes on stderr:
// with quiet, only where the decision log is and what was recorded.
// hostLayout, cwd and capAdd are for the note about the user.
func runNotes(stderr io.Writer, quiet, hostLayout bool, cwd string, capAdd []string) func(run.Note) {
	return func(n run.Note) {
		var line string
		switch n := n.(type) {
		case run.UserChosen:
			if !quiet {
				line = userNote(n.User, hostLayout, cwd, capAdd)
			}
		case run.AgentMissing:
			if !quiet {
				line = agentMissingNote(n)
			}
		case run.NoInit:
			if !quiet {
				line = "no tini-static on this machine (apt-get install tini): the command runs as PID 1, which ignores SIGTERM unless it handles it"
			}
		case run.Closed:
			line = fmt.Sprintf("decision log of sandbox %s: %s", n.ID, n.LogFile)
			if n.JournalFile != "" {
				line += fmt.Sprintf("\nsbx: mock journal of sandbox %s: %s", n.ID, n.JournalFile)
			}
		case run.Recorded:
			line = recordedNote(n)
		case run.NotKept:
			line = fmt.Sprintf("%v; sbx ps -a will not list sandbox %s", n.Err, n.ID)
		}
		if line != "" {
			fmt.Fprintln(stderr, "sbx: "+line)
		}
	}
}

// startFailed words err, run.Start's, with the flags: a command that
// cannot start is said in one line and exits with its code; the rest are
// sbx's failures.
func (o runOptions) startFailed(err error, argv0, rtName string, stderr io.Writer) (int, error) {
	var (
		ae *rootfs.AccessError
		se *run.StartError
		le *run.LogPathError
		pe *run.PolicyFileError
		ie *run.ImageError
	)
	switch {
	case errors.As(err, &ae):
		fmt.Fprintln(stderr, "sbx: "+accessProblem(ae, o.rootfs))
		return ae.Code, nil
	case errors.As(err, &se):
		fmt.Fprintln(stderr, "sbx: "+startProblem(se.Err, argv0, se.User.UID, o.image != ""))
		return se.Err.Code, nil
	case errors.As(err, &le):
		return 0, logPathProblem(le)
	case errors.As(err, &pe):
		return 0, policyFileProblem(pe)
	case errors.As(err, &ie):
		return 0, imageProblem(ie.Err, rtName)
	case errors.Is(err, sandbox.ErrDockerCapAdd):
		return 0, fmt.Errorf("%w; with --runtime docker, give --cap-add only with --user 0, or use --runtime containerd", err)
	}
	return 0, err
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// validName reports whether name can name a sandbox: 1 to 64 letters,
// digits, '.', '_' or '-', the first a letter or digit.
func validName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i, c := range name {
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// parseVolume parses -v SRC:DST[:ro|rw] into a bind mount.
func parseVolume(v string) (rootfs.Mount, error) {
	parts := strings.Split(v, ":")
	mode := "rw"
	switch {
	case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
		mode = parts[2]
	case len(parts) != 2:
		return rootfs.Mount{}, fmt.Errorf("-v %q: want SRC:DST or SRC:DST:ro, e.g. -v ./data:/data:ro", v)
	}
	src, err := filepath.Abs(parts[0])
	if err != nil {
		return rootfs.Mount{}, err
	}
	if _, err := os.Stat(src); err != nil {
		return rootfs.Mount{}, fmt.Errorf("-v %q: %s does not exist", v, src)
	}
	dst := parts[1]
	if !filepath.IsAbs(dst) || filepath.Clean(dst) == "/" {
		return rootfs.Mount{}, fmt.Errorf("-v %q: the destination must be an absolute path other than /", v)
	}
	opts := rootfs.ReadWriteBind
	if mode == "ro" {
		opts = rootfs.ReadOnlyBind
	}
	return rootfs.Mount{Destination: filepath.Clean(dst), Source: src, Type: "bind", Options: opts}, nil
}

// userFlag is the user --user asks for, 0 included (host root, asked
// for), or nil without it: the run library chooses.
func userFlag(v string) (*run.User, error) {
	if v == "" {
		return nil, nil
	}
	uid, gid, err := parseUser(v)
	if err != nil {
		return nil, err
	}
	return &run.User{UID: uid, GID: gid, Why: run.UserAsked}, nil
}

// parseUser parses --user UID[:GID].
func parseUser(v string) (uid, gid uint32, err error) {
	if v == "" {
		return 0, 0, nil
	}
	u, g, hasGID := strings.Cut(v, ":")
	n, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("--user %q: want UID[:GID] in numbers, e.g. --user 1000:1000", v)
	}
	uid, gid = uint32(n), uint32(n)
	if hasGID {
		m, err := strconv.ParseUint(g, 10, 32)
		if err != nil {
			return 0, 0, fmt.Errorf("--user %q: want UID[:GID] in numbers, e.g. --user 1000:1000", v)
		}
		gid = uint32(m)
	}
	return uid, gid, nil
}
