package run

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/approval"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/gateway/mockllm"
	"github.com/sbx-dev/sbx/gateway/secrets"
	"github.com/sbx-dev/sbx/netpolicy"
	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox"
)

// noRuntime is a Runtime that must not be used: its methods panic.
type noRuntime struct{ Runtime }

// TestStartRefusesBeforeMakingAnything: a command that cannot start, a
// log path the sandbox could reach and a log of an earlier run are typed
// errors of prepare, which Start returns before it makes or notes
// anything; what prepare lets through is laid out as asked. (prepare is
// called, not Start, so that a regression cannot make a sandbox here.)
func TestStartRefusesBeforeMakingAnything(t *testing.T) {
	policy, err := netpolicy.Parse("test", []byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	root, vol, logs := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "bin", "tool"), []byte("#!/bin/sh\n"), 0o755)
	full := filepath.Join(logs, "full.jsonl")
	os.WriteFile(full, []byte("{}\n"), 0o600)
	user := &User{UID: 1000, GID: 1000, Why: UserAsked}
	start := func(s Spec) (prepared, error) { return prepare(&s) }
	spec := func(argv0, logFile, logDir string) Spec {
		return Spec{
			Command: []string{argv0},
			Gateway: gateway.Config{Policy: policy, LogFile: logFile},
			Runtime: noRuntime{},
			RootFS:  RootFS{Dir: root},
			Volumes: []rootfs.Mount{{Destination: "/data", Source: vol, Type: "bind", Options: rootfs.ReadWriteBind}},
			User:    user,
			LogDir:  logDir,
		}
	}
	var (
		ae *rootfs.AccessError
		le *LogPathError
		we *WritableError
		ne *decisionlog.NonEmptyLogFileError
	)
	if _, err := start(spec("nothere", "", logs)); !errors.As(err, &ae) || ae.Code != sandbox.ExitNotFound || ae.UID != 1000 {
		t.Errorf("a missing command: got %v, want a *rootfs.AccessError (not found) for uid 1000", err)
	}
	inVol := filepath.Join(vol, "d.jsonl")
	if _, err := start(spec("tool", inVol, "")); !errors.As(err, &le) || le.Path != inVol || le.Dir || !errors.As(err, &we) {
		t.Errorf("a log in a read-write volume: got %v, want a *LogPathError of %s with a *WritableError", err, inVol)
	}
	if _, err := start(spec("tool", "", filepath.Join(vol, "logs"))); !errors.As(err, &le) || !le.Dir {
		t.Errorf("the logs' directory in a volume: got %v, want a *LogPathError of the directory", err)
	}
	if _, err := start(spec("tool", full, "")); !errors.As(err, &ne) || ne.Path != full {
		t.Errorf("a log of an earlier run: got %v, want a *decisionlog.NonEmptyLogFileError", err)
	}
	// The mock journal's path is refused as the log's, named as the
	// journal's: given, or beside a --log file.
	mocked := func(s Spec, journal string) Spec {
		s.Gateway.MockLLM = map[string]*mockllm.Responder{"api.test": mockllm.New(nil)}
		s.Gateway.MockJournal = journal
		return s
	}
	if _, err := start(mocked(spec("tool", "", logs), inVol)); !errors.As(err, &le) || le.Path != inVol || !le.Journal || !errors.As(err, &we) {
		t.Errorf("a journal in a read-write volume: got %v, want a *LogPathError of the journal %s with a *WritableError", err, inVol)
	}
	fullJournal := filepath.Join(logs, "fresh."+JournalName)
	os.WriteFile(fullJournal, []byte("{}\n"), 0o600)
	if _, err := start(mocked(spec("tool", filepath.Join(logs, "fresh.jsonl"), ""), "")); !errors.As(err, &ne) || ne.Path != fullJournal || ne.File != gateway.MockJournalName {
		t.Errorf("a journal beside the log of an earlier run: got %v, want a *decisionlog.NonEmptyLogFileError of %s", err, fullJournal)
	}
	if _, err := start(mocked(spec("tool", "", logs), fullJournal)); !errors.As(err, &ne) || ne.Path != fullJournal {
		t.Errorf("a journal of an earlier run: got %v, want a *decisionlog.NonEmptyLogFileError of %s", err, fullJournal)
	}
	if _, err := start(mocked(spec("tool", "", logs), "")); err != nil {
		t.Errorf("a journal in the sandbox's directory of the logs' directory: got %v, want none", err)
	}
	for _, bad := range []Spec{
		{Gateway: gateway.Config{Policy: policy}, Runtime: noRuntime{}},
		{Command: []string{"tool"}, Runtime: noRuntime{}},
		{Command: []string{"tool"}, Gateway: gateway.Config{Policy: policy}, Runtime: noRuntime{}, RootFS: RootFS{Dir: root, Image: "busybox"}},
		// What the sandbox sets, a caller does not.
		{Command: []string{"tool"}, Gateway: gateway.Config{Policy: policy, Listen: "0.0.0.0:3128"}, Runtime: noRuntime{}, RootFS: RootFS{Dir: root}, User: user, LogDir: logs},
		{Command: []string{"tool"}, Gateway: gateway.Config{Policy: policy, Clients: []netip.Prefix{}}, Runtime: noRuntime{}, RootFS: RootFS{Dir: root}, User: user, LogDir: logs},
	} {
		if _, err := prepare(&bad); err == nil {
			t.Errorf("prepare(%+v) succeeded, want an error", bad)
		}
	}

	s := spec("tool", full, "")
	s.Gateway.LogLimits.Append = true
	s.Workdir, s.Env = "/data", []string{"A=1"}
	p, err := prepare(&s)
	if err != nil || p.hostLayout || p.user != *user || p.layout.Root != root || p.layout.Cwd != "/data" ||
		len(p.layout.Mounts) != 1 || p.layout.Mounts[0].Source != vol || len(p.env) != 1 || p.env[0] != "A=1" {
		t.Errorf("prepare: got %+v, %v; want the root directory, the volume, /data, A=1 and uid 1000", p, err)
	}
	// Root with a capability that passes permission bits is not checked.
	s = spec("nothere", "", logs)
	s.User, s.CapAdd = &User{}, []string{"CAP_DAC_OVERRIDE"}
	if _, err := prepare(&s); err != nil {
		t.Errorf("root with CAP_DAC_OVERRIDE: got %v, want no check", err)
	}
}

// TestSecretsHoldPlaceholders: a secret's variable holds its placeholder
// in the command's environment, never the value; a variable set already,
// and a value file the sandbox could write, are refused before anything
// is made.
func TestSecretsHoldPlaceholders(t *testing.T) {
	policy, err := netpolicy.Parse("test", []byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	root, vol := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "bin", "tool"), []byte("#!/bin/sh\n"), 0o755)
	const value = "sk-test-value-71c3"
	sec, err := secrets.New("API_KEY", value, []string{"api.test"})
	if err != nil {
		t.Fatal(err)
	}
	spec := func(env ...string) Spec {
		return Spec{
			Command: []string{"tool"},
			Gateway: gateway.Config{Policy: policy, Secrets: []*secrets.Secret{sec}},
			Runtime: noRuntime{},
			RootFS:  RootFS{Dir: root},
			Volumes: []rootfs.Mount{{Destination: "/data", Source: vol, Type: "bind", Options: rootfs.ReadWriteBind}},
			User:    &User{UID: 1000, GID: 1000, Why: UserAsked},
			LogDir:  t.TempDir(),
			Env:     env,
		}
	}
	s := spec("A=1")
	p, err := prepare(&s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A=1", "API_KEY=" + sec.Placeholder()}; !slices.Equal(p.env, want) {
		t.Errorf("got the environment %q, want %q", p.env, want)
	}
	for _, kv := range p.env {
		if strings.Contains(kv, value) {
			t.Errorf("the environment holds the value: %q", kv)
		}
	}
	s = spec("API_KEY=mine")
	var ee *SecretEnvError
	if _, err := prepare(&s); !errors.As(err, &ee) || ee.Name != "API_KEY" {
		t.Errorf("API_KEY set by Env too: got %v, want a *SecretEnvError", err)
	}

	// A value file the command could read is refused: in a volume,
	// read-write or read-only, in the root filesystem, or in a system
	// directory the host layout shows read-only.
	roVol := t.TempDir()
	write := func(dir string) string {
		f := filepath.Join(dir, "key")
		if err := os.WriteFile(f, []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	inVol, inROVol, inRoot, outside := write(vol), write(roVol), write(root), write(t.TempDir())
	dirSpec := func() Spec { return spec() }
	hostSpec := func() Spec {
		s := spec()
		s.Command, s.RootFS, s.Cwd = []string{"sh"}, RootFS{HostRoot: t.TempDir()}, t.TempDir()
		return s
	}
	tests := []struct {
		name string
		file string
		spec func() Spec
		ok   bool
	}{
		{"out of the sandbox's reach", outside, dirSpec, true},
		{"out of the sandbox's reach, host layout", outside, hostSpec, true},
		{"in a read-write volume", inVol, dirSpec, false},
		{"in a read-only volume", inROVol, func() Spec {
			s := spec()
			s.Volumes = append(s.Volumes, rootfs.Mount{Destination: "/ro", Source: roVol, Type: "bind", Options: rootfs.ReadOnlyBind})
			return s
		}, false},
		{"in the root filesystem", inRoot, dirSpec, false},
	}
	if b, err := os.ReadFile("/etc/hostname"); err == nil && len(strings.Fields(string(b))) == 1 {
		tests = append(tests, struct {
			name string
			file string
			spec func() Spec
			ok   bool
		}{"in /etc, host layout", "/etc/hostname", hostSpec, false})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsec, err := secrets.Read(netpolicy.Secret{Name: "API_KEY", FromFile: tt.file, Hosts: []string{"api.test"}}, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			s := tt.spec()
			s.Gateway.Secrets = []*secrets.Secret{fsec}
			_, err = prepare(&s)
			var fe *SecretFileError
			var re *ReadableError
			switch {
			case tt.ok && err != nil:
				t.Errorf("got %v, want none", err)
			case !tt.ok && (!errors.As(err, &fe) || fe.Path != tt.file || !errors.As(err, &re)):
				t.Errorf("got %v, want a *SecretFileError of %s with a *ReadableError", err, tt.file)
			case !tt.ok && (!strings.Contains(err.Error(), "which the sandbox can read") || strings.Contains(err.Error(), "write")):
				t.Errorf("got %q, want it to say the sandbox can read it, and nothing of writing", err)
			}
		})
	}
}

// TestPolicyFilesRefused: the policy's file and the approvals file are
// refused before anything is made when the sandbox could write them (in
// a read-write volume, or reached through a link there), once when they
// are one file, and when another user or a symbolic link could change
// them (a link on the path, another owner, group- or other-writable
// file or directory, a file past the approvals bound); not when they lie
// out of reach, in a sticky directory, or do not exist yet.
func TestPolicyFilesRefused(t *testing.T) {
	policy, err := netpolicy.Parse("test", []byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	root, vol, outside := t.TempDir(), t.TempDir(), t.TempDir()
	mustWrite := func(path string, mode os.FileMode) string {
		if err := os.WriteFile(path, []byte("version: 1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	mustWrite(filepath.Join(root, "tool"), 0o755)
	inVol, out := mustWrite(filepath.Join(vol, "policy.yaml"), 0o644), mustWrite(filepath.Join(outside, "policy.yaml"), 0o644)
	linkInVol, linkOut := filepath.Join(vol, "link.yaml"), filepath.Join(outside, "link.yaml")
	groupWritable := mustWrite(filepath.Join(outside, "group.yaml"), 0o664)
	openDir := filepath.Join(outside, "open")
	sticky := filepath.Join(outside, "sticky")
	for _, err := range []error{os.Symlink(out, linkInVol), os.Symlink(out, linkOut), os.Mkdir(openDir, 0o777), os.Chmod(openDir, 0o777),
		os.Mkdir(sticky, 0o777), os.Chmod(sticky, 0o777|os.ModeSticky)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	inOpenDir, inSticky := mustWrite(filepath.Join(openDir, "policy.yaml"), 0o644), mustWrite(filepath.Join(sticky, "policy.yaml"), 0o644)
	big := filepath.Join(outside, "big.yaml")
	if err := os.WriteFile(big, []byte("version: 1\n"+strings.Repeat("#\n", approval.MaxFileSize)), 0o644); err != nil {
		t.Fatal(err)
	}
	other := ""
	if os.Geteuid() == 0 {
		other = mustWrite(filepath.Join(outside, "other.yaml"), 0o644)
		if err := os.Chown(other, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	type refusal struct {
		path              string
		policy, approvals bool
		want              string // in the reason
	}
	for _, tt := range []struct {
		name, policyFile, approvals string
		want                        *refusal
	}{
		{"policy file in a volume, approvals in it", inVol, inVol, &refusal{inVol, true, true, "which the sandbox can write"}},
		{"policy file in a volume, no approvals file", inVol, "", &refusal{inVol, true, false, "which the sandbox can write"}},
		{"policy file outside, approvals in a volume", out, inVol, &refusal{inVol, false, true, "which the sandbox can write"}},
		{"policy file in a volume, approvals outside", inVol, out, &refusal{inVol, true, false, "which the sandbox can write"}},
		{"a link in a volume to a file outside", linkInVol, linkInVol, &refusal{linkInVol, true, true, "which the sandbox can write"}},
		{"a link outside to the policy file", out, linkOut, &refusal{linkOut, true, true, "symbolic link " + linkOut}},
		{"group-writable", out, groupWritable, &refusal{groupWritable, false, true, "chmod go-w"}},
		{"in a directory others can write", inOpenDir, "", &refusal{inOpenDir, true, false, "its directory " + openDir + " has mode 0777"}},
		{"approvals past 1 MiB", out, big, &refusal{big, false, true, "more than the 1048576"}},
		{"another user's", out, other, &refusal{other, false, true, "owned by uid 4242"}},
		{"in a sticky directory", inSticky, inSticky, nil},
		{"approvals not made yet", out, filepath.Join(outside, "new.yaml"), nil},
		{"both outside", out, out, nil},
		{"none", "", "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want != nil && tt.want.path == "" {
				t.Skip("needs root to give a file to another user")
			}
			s := Spec{
				Command:    []string{"/tool"},
				Gateway:    gateway.Config{Policy: policy, ApprovalsFile: tt.approvals},
				PolicyFile: tt.policyFile,
				Runtime:    noRuntime{},
				RootFS:     RootFS{Dir: root},
				Volumes:    []rootfs.Mount{{Destination: "/data", Source: vol, Type: "bind", Options: rootfs.ReadWriteBind}},
				User:       &User{UID: 1000, GID: 1000, Why: UserAsked},
				LogDir:     t.TempDir(),
			}
			_, err := prepare(&s)
			var pe *PolicyFileError
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("prepare: got %v, want no refusal", err)
			case tt.want == nil:
			case !errors.As(err, &pe):
				t.Fatalf("prepare: got %v, want a *PolicyFileError", err)
			default:
				got := refusal{pe.Path, pe.Policy, pe.Approvals, tt.want.want}
				if got != *tt.want || !strings.Contains(pe.Reason.Error(), tt.want.want) {
					t.Errorf("got %+v (%v), want %+v", got, pe.Reason, *tt.want)
				}
			}
		})
	}
}
