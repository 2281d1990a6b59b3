package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox"
)

// Where a run keeps what the Spec does not place elsewhere.
const (
	// DefaultLogDir is where the decision logs go: DefaultLogDir/<id>/decisions.jsonl.
	DefaultLogDir = "/var/lib/sbx/sandboxes"
	// DefaultHostRoot is the skeleton root directory of the host's layout.
	DefaultHostRoot = "/var/lib/sbx/hostroot"
)

// HomesDir is where the overlays of the home (--home overlay, --agent) of
// the host layout whose skeleton root is hostRoot are mounted: beside it,
// in homes. GCHomes removes those a killed run left there.
func HomesDir(hostRoot string) string { return filepath.Join(filepath.Dir(hostRoot), "homes") }

// Runtime is a container runtime Start runs the sandbox with, already
// connected: *sandbox.Containerd or *sandbox.Docker. The caller closes
// it, after Close.
type Runtime interface {
	sandbox.Runtime
	EnsureImage(ctx context.Context, ref string, policy sandbox.PullPolicy, progress io.Writer) (string, error)
}

// RootFS says what the command sees as /: the host's system directories
// (read-only, secrets masked, the working directory read-write) when Dir
// and Image are both "", else a directory (read-only) or an image.
type RootFS struct {
	// Dir is a root directory.
	Dir string
	// Image is an image's reference, in the runtime's store or pulled
	// into it by Pull, with PullProgress (nil: none) shown while it is.
	Image        string
	Pull         sandbox.PullPolicy
	PullProgress io.Writer
	// HostRoot is the host layout's skeleton root directory; "" means
	// DefaultHostRoot.
	HostRoot string
	// TmpSize bounds the host layout's /tmp and home directory, each, in
	// bytes; 0 means rootfs.DefaultTmpSize.
	TmpSize int64
	// Home is how much of the user's home the host layout shows ("" is
	// rootfs.HomeEmpty), and Agent ("claude", "codex", "gemini"), when
	// set, shows only that agent's files of it (rootfs.Agents), as an
	// overlay (docs/home.md).
	Home  rootfs.HomeMode
	Agent string
	// HomeDir is the user's home; "" means the user database's.
	HomeDir string
	// Login ("claude", "codex"), when set, keeps that agent's login of
	// the user's home outside the sandbox (gateway/login, docs/login.md):
	// the command sees a copy of its credential file with placeholders,
	// and the gateway puts the real token in and refreshes it. It needs
	// the host layout with Agent (the same agent), HomeRO or HomeOverlay;
	// else Start refuses it with a *LoginError, as it does a credential
	// file it cannot read.
	Login string
}

// Spec is what Start runs. Command, Gateway.Policy and Runtime are
// required; every other zero field has the default its comment names.
type Spec struct {
	// Command is the command and its arguments.
	Command []string
	// Name labels the sandbox (sandbox.Spec.Name).
	Name string

	// Gateway configures the sandbox's gateway (see gateway.Config): its
	// Policy, which decides the sandbox's requests, is required. What the
	// sandbox implies Start sets, and refuses to find set here: Listen,
	// ListenInterface, Clients and Fence (only this sandbox may use its
	// gateway, which dials no sandbox), DNS, Transparent, OriginalDst and
	// Owner (Capture's), Sandbox (its id), TokenFile, CA (a CA of this
	// sandbox's, which its command trusts) and RecordLLM (Recordings').
	// The management API is served on a socket in the sandbox's state
	// directory, and on Gateway.API's addresses besides. Gateway.LogFile
	// "" means LogDir/<id>/decisions.jsonl, with LogDir "" meaning
	// DefaultLogDir; Gateway.LogLimits.Append lets a file that is not
	// empty be added to. When it mocks an LLM (Gateway.MockLLM,
	// Gateway.LLMScripts), Gateway.MockJournal "" means the journal is
	// kept beside the log: LogDir/<id>/mock-requests.jsonl (JournalName,
	// which FindJournal finds), or beside a Gateway.LogFile with
	// ".mock-requests.jsonl" in place of its extension. The journal's
	// path is refused as the log's is, and appended to as it is.
	Gateway gateway.Config
	LogDir  string
	// PolicyFile is the file Gateway.Policy was read from, "" for none.
	// Start refuses it, or Gateway.ApprovalsFile, with a *PolicyFileError
	// when the sandbox or another user could change it. Gateway.ApprovalsFile is pinned
	// (approval.PinFile) before the sandbox starts, until Close:
	// always answers write the file resolved then, through no link the
	// sandbox plants later.
	PolicyFile string
	// Recordings are recorded, and written by Close.
	Recordings []Recording

	// RootFS is the command's /, Volumes are mounted over it, and Env
	// comes after the layout's own variables; then each secret of
	// Gateway.Secrets (secrets.Secret) sets its name to its placeholder,
	// and Start refuses a name set before with a *SecretEnvError.
	RootFS  RootFS
	Volumes []rootfs.Mount
	Env     []string
	// Cwd is the working directory sbx was started in, which the host's
	// layout shares; "" means this process's.
	Cwd string
	// Workdir is the command's working directory in the sandbox; "" is
	// the layout's (Cwd with the host's layout, else /).
	Workdir string
	// User is who the command runs as; nil means ChooseUser's choice.
	User *User
	// CapAdd are capabilities given back (of sandbox.DroppedCapabilities),
	// and Limits bound memory, CPU and processes.
	CapAdd []string
	Limits sandbox.Limits
	// TTY gives the command a terminal; Stdin (nil: none), Stdout and
	// Stderr (nil: discarded) are its streams.
	TTY            bool
	Stdin          io.Reader
	Stdout, Stderr io.Writer

	// Runtime runs the container.
	Runtime Runtime
	// Pool is where the sandbox's /30 comes from, and StateDir where
	// running sandboxes are recorded (sandbox.Spec's defaults).
	Pool     netip.Prefix
	StateDir string
	// Capture sends what ignores the proxy to the gateway too
	// (sandbox.Spec.Capture).
	Capture bool

	// Notes, if set, receives the Notes of Start and Close, in order.
	Notes func(Note)
}

// A StartError is the runtime's refusal to start the command, with the
// user it was to run as.
type StartError struct {
	User User
	Err  *sandbox.StartError
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// An ImageError is an image that could not be made ready in the
// runtime's store; Err is the runtime's error (sandbox.ErrImageNotPresent,
// ErrImageNotFound, ErrRegistryUnreachable, ...).
type ImageError struct {
	Ref string
	Err error
}

func (e *ImageError) Error() string { return e.Err.Error() }
func (e *ImageError) Unwrap() error { return e.Err }

// A SecretEnvError is a variable that the command's environment (Spec.Env,
// or the root filesystem's layout) sets and that a secret of
// Spec.Gateway.Secrets holds the placeholder in.
type SecretEnvError struct {
	Name string
}

func (e *SecretEnvError) Error() string {
	return fmt.Sprintf("the command's environment sets %s, which holds the placeholder of the secret of that name: set it once", e.Name)
}

// A SecretFileError is a secret's file (secrets.Secret.File) that the
// sandbox can read: it lies in a directory the sandbox sees (the root
// filesystem, a system directory of the host layout, the working
// directory, a -v volume, read-only or not: rootfs.Layout.Visible), or is
// reached through one (Reason is a *ReadableError), or it cannot be told
// (another error).
type SecretFileError struct {
	Name, Path string
	Reason     error
}

func (e *SecretFileError) Error() string {
	var re *ReadableError
	if errors.As(e.Reason, &re) {
		return fmt.Sprintf("the value of secret %s is read from %s: %v, so the command could read the value", e.Name, e.Path, e.Reason)
	}
	return fmt.Sprintf("the value of secret %s is read from %s: cannot tell whether the sandbox could read it (%v)", e.Name, e.Path, e.Reason)
}

func (e *SecretFileError) Unwrap() error { return e.Reason }

// Run is a running sandbox made by Start. Wait and Stop may be called
// from different goroutines; Close must always be called.
type Run struct {
	s           *sandbox.Sandbox
	logFile     string
	journalFile string // "" without mocks
	recordings  []recording
	notes       func(Note)
	unpin       func() // releases the approvals file's pin, and the home's overlay
	closeOnce   sync.Once
	closeErr    error

	// ended is what Close keeps of the sandbox when it ends (EndedName),
	// its exit code set by Wait and Stop.
	endedMu sync.Mutex
	ended   Ended
}

// ID is the sandbox's id.
func (r *Run) ID() string { return r.s.ID }

// Proxy is the gateway's URL, as the command finds it in HTTP_PROXY.
func (r *Run) Proxy() string { return r.s.Proxy }

// LogFile is the decision log's path.
func (r *Run) LogFile() string { return r.logFile }

// JournalFile is the path of the mocks' journal, "" when the sandbox
// mocks no LLM.
func (r *Run) JournalFile() string { return r.journalFile }

// Wait waits for the command's end and returns its exit code, or ctx's
// error when ctx ends first (the command runs on: Stop ends it).
func (r *Run) Wait(ctx context.Context) (int, error) { return r.exited(r.s.Wait(ctx)) }

// Stop sends the command SIGTERM, then SIGKILL after grace, and returns
// its exit code.
func (r *Run) Stop(grace time.Duration) (int, error) { return r.exited(r.s.Stop(grace)) }

// exited notes the command's exit code for what Close keeps, when err
// says it is known.
func (r *Run) exited(code int, err error) (int, error) {
	if err == nil {
		r.endedMu.Lock()
		r.ended.ExitCode = &code
		r.endedMu.Unlock()
	}
	return code, err
}

// Close takes the sandbox and its gateway down (Closed is noted), then
// writes the recordings (each noted as Recorded). It returns every
// failure: the teardown's, and a *RecordingError for each recording not
// written. Only the first call does anything.
func (r *Run) Close() error {
	r.closeOnce.Do(func() {
		var errs *multierror.Error
		errs = multierror.Append(errs, r.s.Close())
		r.unpin()
		// Kept as Docker keeps an exited container, until sbx rm or sbx
		// gc --logs-older-than removes it.
		r.endedMu.Lock()
		e := r.ended
		r.endedMu.Unlock()
		e.Ended = time.Now().UTC()
		if err := writeEnded(e); err != nil {
			r.notes(NotKept{ID: e.ID, Err: err}) // the run's outcome stands
		}
		r.notes(Closed{ID: r.s.ID, LogFile: r.logFile, JournalFile: r.journalFile})
		errs = multierror.Append(errs, writeRecordings(r.recordings, r.notes)...)
		r.closeErr = errs.ErrorOrNil()
	})
	return r.closeErr
}

// prepared is what Start works out before it makes anything.
type prepared struct {
	hostLayout bool
	layout     rootfs.Layout
	user       User
	env        []string
	release    func() // undoes what prepare made: the home's overlay
}

// prepare chooses the user and lays out the root filesystem, and checks
// that the command can start and the log is out of the sandbox's reach.
func prepare(spec *Spec) (prepared, error) {
	if len(spec.Command) == 0 || spec.Gateway.Policy == nil || spec.Runtime == nil {
		return prepared{}, errors.New("run: Spec.Command, Spec.Gateway.Policy and Spec.Runtime are required")
	}
	if set := sandboxOwned(&spec.Gateway); len(set) > 0 {
		return prepared{}, fmt.Errorf("run: Spec.Gateway.%s: Start sets it for the sandbox; leave it zero", strings.Join(set, ", "))
	}
	fsys := spec.RootFS
	if fsys.Dir != "" && fsys.Image != "" {
		return prepared{}, errors.New("run: RootFS.Dir and RootFS.Image both say what / is; give one of them")
	}
	p := prepared{hostLayout: fsys.Dir == "" && fsys.Image == "", release: func() {}}
	if err := fsys.CheckLogin(); err != nil {
		return p, err
	}
	cwd := spec.Cwd
	if cwd == "" {
		var err error
		if cwd, err = os.Getwd(); err != nil {
			return p, err
		}
	}
	if spec.User != nil {
		p.user = *spec.User
	} else {
		var err error
		if p.user, err = ChooseUser(p.hostLayout, fsys.Image != "", cwd); err != nil {
			return p, err
		}
	}
	var err error
	switch {
	case fsys.Image != "":
	case p.hostLayout:
		hostRoot := fsys.HostRoot
		if hostRoot == "" {
			hostRoot = DefaultHostRoot
		}
		var home rootfs.HomeView
		if home, p.release, err = homeView(fsys, p.user, HomesDir(hostRoot)); err != nil {
			return p, err
		}
		if fsys.Agent != "" && spec.Notes != nil && !slices.ContainsFunc(home.Show, func(rel string) bool {
			_, err := os.Lstat(filepath.Join(home.Dir, rel))
			return err == nil
		}) {
			spec.Notes(AgentMissing{Agent: fsys.Agent, Home: home.Dir})
		}
		p.layout, err = rootfs.Host(hostRoot, cwd, rootfs.HostOptions{UID: p.user.UID, GID: p.user.GID, TmpSize: fsys.TmpSize, Home: home})
		p.layout.Env = append(p.layout.Env, homePath(home)...)
		if err == nil && fsys.Login != "" {
			var remove func()
			if remove, err = keepLogin(spec, &p, home, filepath.Join(filepath.Dir(hostRoot), "logins")); err == nil {
				release := p.release
				p.release = func() { remove(); release() }
			}
		}
	default:
		p.layout, err = rootfs.Dir(fsys.Dir)
	}
	if err != nil {
		return p, err
	}
	if spec.Workdir != "" {
		p.layout.Cwd = spec.Workdir
	}
	p.layout.Mounts = append(p.layout.Mounts, spec.Volumes...)
	p.env = append(slices.Clip(p.layout.Env), spec.Env...)
	// A secret's variable holds its placeholder, never the value, which
	// stays in the gateway (docs/secrets.md).
	for _, sec := range spec.Gateway.Secrets {
		if f := sec.File(); f != "" {
			if err := unreadable(f, p.layout.Visible()); err != nil {
				return p, &SecretFileError{Name: sec.Name(), Path: f, Reason: err}
			}
		}
		for _, kv := range p.env {
			if k, _, _ := strings.Cut(kv, "="); k == sec.Name() {
				return p, &SecretEnvError{Name: sec.Name()}
			}
		}
		p.env = append(p.env, sec.Name()+"="+sec.Placeholder())
	}
	// A command that cannot start says why before anything is made:
	// which uid cannot enter which directory, or that it is not on the
	// PATH.
	if !overridesPermissions(p.user.UID, spec.CapAdd) {
		err := p.layout.CheckCommand(p.user.UID, p.user.GID, p.layout.Cwd, spec.Command[0], commandPath(p.env))
		var ae *rootfs.AccessError
		if errors.As(err, &ae) {
			if ae.Op == "find" && p.hostLayout {
				ae.Hint = hiddenCommand(fsys, p.user, spec.Command[0])
			}
			return p, ae
		}
	}
	// The gateway refuses a link, a pipe or a file of another owner at the
	// log's path, and one that is not empty unless appended to; a path the
	// sandbox can write, or reach the log through (by any mount), is
	// refused here, and a file that is not empty too, before anything is
	// made. So is the mock journal's, kept as safely.
	appendTo := spec.Gateway.LogLimits.Append
	if err := checkLogPath(spec.Gateway.LogFile, logDir(spec), appendTo, p.layout.Writable()); err != nil {
		return p, err
	}
	if j := journalFile(spec); j != "" {
		if err := journalError(checkLogPath(j, "", appendTo, p.layout.Writable())); err != nil {
			return p, err
		}
	}
	// Rules later runs read must be the user's: a policy or approvals file
	// the sandbox, or another user, could change is refused.
	if err := checkPolicyFiles(spec.PolicyFile, spec.Gateway.ApprovalsFile, p.layout.Writable()); err != nil {
		return p, err
	}
	return p, nil
}

// sameFilePath reports whether the paths a and b name one file: the same
// absolute path, or the same existing file.
func sameFilePath(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	if err1 == nil && err2 == nil && aa == ab {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// mocks reports whether the gateway mocks an LLM, and so keeps a journal.
func mocks(cfg *gateway.Config) bool {
	return len(cfg.MockLLM) > 0 || len(cfg.LLMScripts) > 0
}

// journalFile is the mock journal's path when it is known before the
// sandbox's id: Gateway.MockJournal, or beside Gateway.LogFile; "" when
// it goes in the sandbox's directory of the log directory, or there are
// no mocks.
func journalFile(spec *Spec) string {
	switch {
	case !mocks(&spec.Gateway):
		return ""
	case spec.Gateway.MockJournal != "":
		return spec.Gateway.MockJournal
	case spec.Gateway.LogFile != "":
		return journalBeside(spec.Gateway.LogFile)
	}
	return ""
}

func logDir(spec *Spec) string {
	if spec.LogDir == "" {
		return DefaultLogDir
	}
	return spec.LogDir
}

// commandPath is the PATH the command gets: the last PATH in env, else
// the sandbox's default.
func commandPath(env []string) string {
	p := sandbox.DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			p = v
		}
	}
	return p
}

// overridesPermissions reports whether caps hold a capability with which
// root passes permission bits, so that they decide nothing.
func overridesPermissions(uid uint32, caps []string) bool {
	return uid == 0 && (slices.Contains(caps, "CAP_DAC_OVERRIDE") || slices.Contains(caps, "CAP_DAC_READ_SEARCH"))
}

// Start makes the sandbox and starts its command. Before it makes
// anything it returns a *rootfs.AccessError for a command that cannot
// start (the code to exit with in its Code), a *LogPathError or
// *decisionlog.NonEmptyLogFileError for a log path it refuses, a
// *PolicyFileError for a policy or approvals file it refuses, and an
// *ImageError for an image it cannot make ready; the runtime's refusal
// to start the command is a *StartError; sandbox.ErrDockerCapAdd is
// Docker's refusal of CapAdd for a user that is not root. On error
// nothing is left. The caller must Close the Run.
func Start(ctx context.Context, spec Spec) (*Run, error) {
	if spec.Notes == nil {
		spec.Notes = func(Note) {}
	}
	p, err := prepare(&spec)
	if err != nil {
		if p.release != nil {
			p.release()
		}
		return nil, err
	}
	spec.Notes(UserChosen{User: p.user})
	// The approvals file is resolved now, before the sandbox can plant a
	// link near it, and written through what was resolved.
	unpin := p.release
	if spec.Gateway.ApprovalsFile != "" {
		unpinFile := approval.PinFile(spec.Gateway.ApprovalsFile)
		unpin = func() { unpinFile(); p.release() }
	}
	r, err := start(ctx, &spec, p, unpin)
	if err != nil {
		unpin()
		return nil, err
	}
	return r, nil
}

// start is Start once prepared, with the approvals file pinned (unpin
// releases it); on error the caller releases it.
func start(ctx context.Context, spec *Spec, p prepared, unpin func()) (*Run, error) {
	var err error
	image := spec.RootFS.Image
	if image != "" {
		if image, err = spec.Runtime.EnsureImage(ctx, image, spec.RootFS.Pull, spec.RootFS.PullProgress); err != nil {
			return nil, &ImageError{Ref: spec.RootFS.Image, Err: err}
		}
	}
	// TLS inspection, for the hosts the policy inspects now or later: a
	// CA for this sandbox, which its command trusts (docs/inspection.md).
	insp, err := newInspection(trustTarget{host: p.hostLayout, dir: p.layout.Root}, spec.Gateway.UpstreamRoots)
	if err != nil {
		return nil, err
	}
	initPath := sandbox.FindInit()
	if initPath == "" {
		spec.Notes(NoInit{})
	}
	created := time.Now().UTC()
	r := &Run{recordings: newRecordings(spec.Recordings), notes: spec.Notes, unpin: unpin, logFile: spec.Gateway.LogFile, journalFile: journalFile(spec)}
	var mounts []specs.Mount
	for _, m := range p.layout.Mounts {
		mounts = append(mounts, specs.Mount{Destination: m.Destination, Source: m.Source, Type: m.Type, Options: m.Options})
	}
	stdout, stderr := spec.Stdout, spec.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	s, err := sandbox.Start(ctx, sandbox.Spec{
		Name:     spec.Name,
		Command:  spec.Command,
		StateDir: spec.StateDir,
		Pool:     spec.Pool,
		Runtime:  spec.Runtime,
		Gateway:  r.gatewayStarter(spec, insp),
		Container: sandbox.ContainerSpec{
			RootFS:        p.layout.Root,
			Image:         image,
			Mounts:        mounts,
			Masked:        p.layout.Masked,
			Env:           p.env,
			Cwd:           p.layout.Cwd,
			UID:           p.user.UID,
			GID:           p.user.GID,
			KeepImageUser: p.user.KeepImage,
			CapAdd:        spec.CapAdd,
			Limits:        spec.Limits,
			TTY:           spec.TTY,
			Init:          initPath,
		},
		Stdio:   sandbox.Stdio{In: spec.Stdin, Out: stdout, Err: stderr},
		Capture: spec.Capture,
		Trust:   insp.trust,
	})
	var se *sandbox.StartError
	if errors.As(err, &se) {
		return nil, &StartError{User: p.user, Err: se}
	}
	if err != nil {
		return nil, err
	}
	r.s = s
	r.ended = Ended{ID: s.ID, Name: spec.Name, Command: spec.Command, Created: created, Log: r.logFile, Journal: r.journalFile, Dir: filepath.Join(logDir(spec), s.ID)}
	return r, nil
}

// gatewayStarter returns the function that starts the sandbox's gateway,
// configured by gatewayConfig, with the refused packets' reports when the
// sandbox captures.
func (r *Run) gatewayStarter(spec *Spec, insp *inspection) sandbox.StartGateway {
	return func(ctx context.Context, c sandbox.GatewayConfig) (io.Closer, error) {
		if r.logFile == "" {
			r.logFile = filepath.Join(logDir(spec), c.ID, "decisions.jsonl")
		}
		if r.journalFile == "" && mocks(&spec.Gateway) {
			r.journalFile = filepath.Join(logDir(spec), c.ID, JournalName)
		}
		cfg := gatewayConfig(spec.Gateway, c, insp.ca, r.logFile, recorders(r.recordings))
		cfg.MockJournal = r.journalFile
		g, err := gateway.Start(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if c.Capture == nil {
			return g, nil
		}
		// Ends when the sandbox closes its packet log, or on a read
		// error, which is said and recorded.
		go forwardPackets(c.Capture.Packets, g.Bypass, cfg.Logger)
		return g, nil
	}
}

// gatewayProcess is the gateway's Process for what Owners.Lookup
// returned: p, or none and why (the error's message, which the records
// carry as process_unknown).
func gatewayProcess(p sandbox.Process, err error) gateway.Process {
	if err != nil {
		return gateway.Process{Unknown: err.Error()}
	}
	return gateway.Process{PID: p.PID, Comm: p.Comm, Exe: p.Exe}
}

// sandboxOwned names the fields of cfg that gatewayConfig sets for the
// sandbox and that are set already.
func sandboxOwned(cfg *gateway.Config) []string {
	var set []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"Listen", cfg.Listen != ""},
		{"ListenInterface", cfg.ListenInterface != ""},
		{"Clients", cfg.Clients != nil},
		{"Fence", cfg.Fence != nil},
		{"DNS", cfg.DNS != ""},
		{"Transparent", cfg.Transparent != nil},
		{"OriginalDst", cfg.OriginalDst != nil},
		{"Owner", cfg.Owner != nil},
		{"Sandbox", cfg.Sandbox != ""},
		{"TokenFile", cfg.TokenFile != ""},
		{"CA", cfg.CA != nil},
		{"RecordLLM", cfg.RecordLLM != nil},
	} {
		if f.set {
			set = append(set, f.name)
		}
	}
	return set
}

// gatewayConfig is the configuration of the sandbox's gateway: cfg, the
// Spec's, with what the sandbox c implies. It listens on the host end of
// the sandbox's veth and serves only the sandbox, never dials a sandbox,
// writes its decision log to logFile, inspects with ca, records with
// recorders, and, when the sandbox captures, serves capture's DNS stub
// and transparent listener and names the process behind each socket.
func gatewayConfig(cfg gateway.Config, c sandbox.GatewayConfig, ca *gateway.CA, logFile string, recorders map[string]*mockllm.Recorder) gateway.Config {
	cfg.Listen = c.Listen.String()
	cfg.ListenInterface = c.Interface
	cfg.Clients = []netip.Prefix{netip.PrefixFrom(c.Client, c.Client.BitLen())}
	cfg.Fence = c.Fence
	cfg.Sandbox = c.ID
	cfg.API = append([]string{"unix:" + filepath.Join(c.StateDir, "api.sock")}, cfg.API...)
	cfg.TokenFile = filepath.Join(c.StateDir, "token")
	cfg.LogFile = logFile
	cfg.CA = ca
	cfg.RecordLLM = recorders
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Capture == nil {
		return cfg
	}
	// Capture (docs/capture.md): the DNS stub, the transparent listener,
	// and which process owned each socket.
	cfg.DNS, cfg.Transparent = c.Capture.DNS.String(), c.Capture.Transparent
	owners := c.Capture.Owners
	cfg.Owner = func(network string, client, remote netip.AddrPort) gateway.Process {
		return gatewayProcess(owners.Lookup(network, client, remote))
	}
	return cfg
}
