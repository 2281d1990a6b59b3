package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sbx-dev/sbx/gateway/api"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// endedDirs lays out a state directory with one running sandbox
// (7a7a7a7a, named agent, whose log directory is there too) and a log
// directory with what two ended sandboxes left: e1e1e1e1, named build,
// exited 3, its log written elsewhere (--log), ended an hour ago; and
// e2e2e2e2, kept by an sbx before records (its log only), 50 days old.
func endedDirs(t *testing.T) (stateDir, logDir, elsewhere string) {
	t.Helper()
	stateDir, logDir = t.TempDir(), t.TempDir()
	dir := fakeSandboxIn(t, stateDir, "7a7a7a7a", "agent")
	status, _ := json.Marshal(api.Status{PolicyVersion: 1, Counts: api.Counts{Allowed: 1}})
	serveSocket(t, dir, httpAnswer("200 OK", string(status)))
	mkfile := func(path, content string, mtime time.Time) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	mkfile(filepath.Join(logDir, "7a7a7a7a", run.LogName), "{}\n", now.Add(-100*24*time.Hour)) // running, however old its log
	elsewhere = filepath.Join(t.TempDir(), "build.jsonl")
	mkfile(elsewhere, "{}\n", now)
	code := 3
	rec, _ := json.Marshal(run.Ended{ID: "e1e1e1e1", Name: "build", Command: []string{"npm", "test"}, Created: now.Add(-2 * time.Hour),
		Ended: now.Add(-time.Hour), ExitCode: &code, Log: elsewhere, Dir: filepath.Join(logDir, "e1e1e1e1")})
	mkfile(filepath.Join(logDir, "e1e1e1e1", run.EndedName), string(rec), now)
	mkfile(filepath.Join(logDir, "e2e2e2e2", run.LogName), "{}\n", now.Add(-50*24*time.Hour))
	return stateDir, logDir, elsewhere
}

// TestPSAll: sbx ps lists the running sandbox; -a the ended ones too,
// the last to end first, with their exit status and where their log
// is; -q (and -aq) their ids only; --format json one object a line.
func TestPSAll(t *testing.T) {
	stateDir, logDir, elsewhere := endedDirs(t)
	dirs := []string{"--state-dir", stateDir, "--log-dir", logDir}
	ps := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := runCLI(t, append(append([]string{"ps"}, args...), dirs...)...)
		if code != 0 || stderr != "" {
			t.Fatalf("sbx ps %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
		return stdout
	}
	if out := ps(); !strings.Contains(out, "7a7a7a7a") || strings.Contains(out, "e1e1e1e1") || strings.Contains(out, "e2e2e2e2") {
		t.Errorf("sbx ps: got\n%s\nwant the running sandbox only", out)
	}
	out := ps("-a")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var ids, states []string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		ids = append(ids, f[0])
		states = append(states, f[2])
	}
	if !strings.Contains(lines[0], "ENDED") || !strings.Contains(lines[0], "LOG") || !slices.Equal(ids, []string{"7a7a7a7a", "e1e1e1e1", "e2e2e2e2"}) {
		t.Fatalf("sbx ps -a: got\n%s\nwant the running one, then e1e1e1e1 and e2e2e2e2, with ENDED and LOG", out)
	}
	if !strings.Contains(lines[2], "build") || !strings.Contains(lines[2], "exited 3") || !strings.HasSuffix(lines[2], elsewhere) {
		t.Errorf("sbx ps -a: got the row %q, want build, exited 3 and its log %s", lines[2], elsewhere)
	}
	if !strings.Contains(lines[3], "ended") || !strings.HasSuffix(lines[3], filepath.Join(logDir, "e2e2e2e2", run.LogName)) {
		t.Errorf("sbx ps -a: got the row %q, want ended (no exit code known) and its log", lines[3])
	}
	if got, want := ps("-q"), "7a7a7a7a\n"; got != want {
		t.Errorf("sbx ps -q: got %q, want %q", got, want)
	}
	if got, want := ps("-aq"), "7a7a7a7a\ne1e1e1e1\ne2e2e2e2\n"; got != want {
		t.Errorf("sbx ps -aq: got %q, want %q", got, want)
	}
	var rows []map[string]any
	dec := json.NewDecoder(bytes.NewReader([]byte(ps("-a", "--format", "json"))))
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	type row struct{ ID, State, Log, Name string }
	var got []row
	for _, r := range rows {
		s := func(k string) string { v, _ := r[k].(string); return v }
		got = append(got, row{s("id"), s("state"), s("log"), s("name")})
	}
	want := []row{{"7a7a7a7a", "running", "", "agent"}, {"e1e1e1e1", "exited 3", elsewhere, "build"}, {"e2e2e2e2", "ended", filepath.Join(logDir, "e2e2e2e2", run.LogName), ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sbx ps -a --format json (-want +got):\n%s", diff)
	}
	if len(rows) == 3 && (rows[1]["exit_code"] != float64(3) || rows[0]["policy_version"] != float64(1)) {
		t.Errorf("sbx ps -a --format json: got %v, want exit_code 3 of e1e1e1e1 and policy_version 1 of the running one", rows)
	}
	for _, args := range [][]string{{"--format", "yaml"}, {"-q", "--format", "json"}} {
		if _, _, code := runCLI(t, append(append([]string{"ps"}, args...), dirs...)...); code != exitUsage {
			t.Errorf("sbx ps %s: got exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
	}
}

// TestRm: sbx rm removes what is kept of an ended sandbox, named by its
// name or its id, leaving a log written elsewhere (and saying so); it
// refuses a running sandbox with a clear error and removes nothing of
// it, goes on past a name it cannot remove, and exits 1 then. An ended
// sandbox found by its name is where decisions --sandbox looks too.
func TestRm(t *testing.T) {
	stateDir, logDir, elsewhere := endedDirs(t)
	dirs := []string{"--state-dir", stateDir, "--log-dir", logDir}
	if path, err := run.FindLog(stateDir, logDir, "build"); err != nil || path != elsewhere {
		t.Errorf("FindLog of the ended sandbox named build: got %q, %v; want %q, where its --log was", path, err, elsewhere)
	}
	stdout, stderr, code := runCLI(t, append([]string{"rm", "build", "7a7a7a7a", "agent", "e2e2"}, dirs...)...)
	if code != exitFailure {
		t.Errorf("sbx rm: got exit %d, want 1 (a running sandbox was named)", code)
	}
	for _, want := range []string{"removed sandbox e1e1e1e1", "removed sandbox e2e2e2e2", elsewhere + ", written where it was told, is left"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("sbx rm: stdout %q lacks %q", stdout, want)
		}
	}
	if want := "sbx: sandbox 7a7a7a7a is running; stop it first: sbx stop 7a7a7a7a\n"; strings.Count(stderr, want) != 2 {
		t.Errorf("sbx rm: got stderr %q, want %q for its id and its name", stderr, want)
	}
	for _, gone := range []string{"e1e1e1e1", "e2e2e2e2"} {
		if _, err := os.Stat(filepath.Join(logDir, gone)); !os.IsNotExist(err) {
			t.Errorf("sandbox %s's directory is left: %v", gone, err)
		}
	}
	for _, kept := range []string{elsewhere, filepath.Join(logDir, "7a7a7a7a", run.LogName)} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}
	if _, stderr, code := runCLI(t, append([]string{"rm", "build"}, dirs...)...); code != exitFailure || !strings.Contains(stderr, "no ended sandbox of that id or name is kept in "+logDir) {
		t.Errorf("sbx rm of what is gone: got exit %d, stderr %q; want 1 and why", code, stderr)
	}
}

// TestExpireLogs: what sbx gc --logs-older-than runs after its sweep
// removes what is kept of the sandboxes that ended longer ago than the
// duration, by their record's end, else by their log's last change; a
// running sandbox's log, however old, stays. (sbx gc itself sweeps the
// machine's containers and networks, so this test calls what it calls.)
func TestExpireLogs(t *testing.T) {
	stateDir, logDir, elsewhere := endedDirs(t)
	var out strings.Builder
	if err := expireLogs(&out, stateDir, logDir, 30*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "removed the kept log of sandbox e2e2e2e2") || strings.Contains(out.String(), "e1e1e1e1") {
		t.Errorf("expireLogs 30d: got %q, want e2e2e2e2 removed only", out.String())
	}
	if _, err := os.Stat(filepath.Join(logDir, "e1e1e1e1", run.EndedName)); err != nil {
		t.Errorf("expireLogs 30d removed the record of a sandbox that ended an hour ago: %v", err)
	}
	out.Reset()
	if err := expireLogs(&out, stateDir, logDir, 30*time.Minute); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "removed the kept log of sandbox e1e1e1e1") {
		t.Errorf("expireLogs 30m: got %q, want e1e1e1e1 removed", out.String())
	}
	for _, kept := range []string{elsewhere, filepath.Join(logDir, "7a7a7a7a", run.LogName)} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("expireLogs removed %s: %v", kept, err)
		}
	}
	out.Reset()
	if err := expireLogs(&out, stateDir, logDir, 0); err != nil || out.String() != "no kept log is older than 0s\n" {
		t.Errorf("expireLogs with nothing left: got %q, %v", out.String(), err)
	}
}

// TestGCLogsOlderThanFlag: --logs-older-than takes Go's durations and
// days, and refuses anything else as a usage error before anything is
// done.
func TestGCLogsOlderThanFlag(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{{"72h", 72 * time.Hour, true}, {"30d", 30 * 24 * time.Hour, true}, {"0", 0, true}, {"-1h", 0, false}, {"week", 0, false}, {"3.5d", 0, false}} {
		got, err := parseAge(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseAge(%q): got %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if _, stderr, code := runCLI(t, "gc", "--logs-older-than", "week"); code != exitUsage || !strings.Contains(stderr, `--logs-older-than "week": want a duration such as 72h or 30d`) {
		t.Errorf("sbx gc --logs-older-than week: got exit %d, stderr %q; want a usage error", code, stderr)
	}
}

// TestPrivilegedRunKeepsEndedRecord: a sandbox run with --name and --log
// elsewhere, whose command exits 7, is listed after its end by sbx ps -a
// with exit 7 and its log's path; sbx decisions --sandbox NAME reads that
// log; sbx rm NAME removes its record and leaves the log, which is the
// user's.
func TestPrivilegedRunKeepsEndedRecord(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for namespaces, iptables and containerd (CI runs as root)")
	}
	dir := t.TempDir()
	state, logFile := filepath.Join(dir, "state"), filepath.Join(dir, "log.jsonl")
	name := "habits-" + strings.ReplaceAll(filepath.Base(dir), "0", "")
	_, stderr, code := runCLI(t, "run", "--quiet", "--rootfs", busyboxRoot(t), "--state-dir", state,
		"--subnet-pool", "10.213.250.0/24", "--log", logFile, "--name", name, "--", "sh", "-c", "exit 7")
	if code != 7 {
		t.Fatalf("sbx run: exit %d, want 7\n%s", code, stderr)
	}
	id := sandboxIDIn(t, stderr)
	t.Cleanup(func() { os.RemoveAll(filepath.Join(logRoot, id)) })
	stdout, stderr, code := runCLI(t, "ps", "-a", "--format", "json", "--state-dir", state)
	var found map[string]any
	for line := range strings.Lines(stdout) {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["id"] == id {
			found = r
		}
	}
	if code != 0 || found == nil || found["name"] != name || found["state"] != "exited 7" || found["exit_code"] != float64(7) || found["log"] != logFile {
		t.Errorf("sbx ps -a --format json: exit %d, got the row %v, want %s named %s, exited 7, log %s\n%s", code, found, id, name, logFile, stderr)
	}
	if out, stderr, code := runCLI(t, "decisions", "--sandbox", name, "--state-dir", state); code != 0 || !strings.Contains(out, "policy loaded") {
		t.Errorf("sbx decisions --sandbox %s: exit %d, stdout %q, stderr %q; want its log's records", name, code, out, stderr)
	}
	if out, stderr, code := runCLI(t, "rm", name, "--state-dir", state); code != 0 || !strings.Contains(out, "removed sandbox "+id) {
		t.Errorf("sbx rm %s: exit %d, stdout %q, stderr %q", name, code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(logRoot, id)); !os.IsNotExist(err) {
		t.Errorf("sbx rm left %s: %v", filepath.Join(logRoot, id), err)
	}
	if _, err := os.Stat(logFile); err != nil {
		t.Errorf("sbx rm removed the --log file: %v", err)
	}
}

// TestUIListsEndedByRecord: the web view lists the sandboxes that ended
// as sbx ps -a does, with the name their record keeps, and opens the log
// of one whose log was written elsewhere (--log).
func TestUIListsEndedByRecord(t *testing.T) {
	stateDir, logDir, elsewhere := endedDirs(t)
	if err := os.WriteFile(elsewhere, []byte(`{"v":1,"seq":1,"event":"policy","time":"2026-12-01T10:00:00Z","policy_version":1,"change":"policy loaded"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := hostSandboxes{stateDir: stateDir, logDir: logDir}
	list, err := h.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range list {
		got = append(got, s.ID+" "+s.Name+" "+s.Status)
	}
	want := []string{"7a7a7a7a agent running", "e1e1e1e1 build ended", "e2e2e2e2  ended"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the web view's sandboxes (-want +got):\n%s", diff)
	}
	rc, err := h.OpenLog(t.Context(), "e1e1e1e1")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, rc); err != nil || !strings.Contains(b.String(), "policy loaded") {
		t.Errorf("OpenLog of e1e1e1e1: got %q, %v; want the log written elsewhere", b.String(), err)
	}
}
