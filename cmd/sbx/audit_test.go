package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
)

// auditLog writes records as the gateway encodes them to a file named
// name in dir, and returns its path.
func auditLog(t *testing.T, dir, name string, recs ...decisionlog.Record) string {
	t.Helper()
	var b bytes.Buffer
	for i := range recs {
		recs[i].Seq = uint64(i + 1)
		b.Write(recs[i].AppendJSON(nil))
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func decided(kind, method, host string, port int, path, action string) decisionlog.Record {
	return decisionlog.Record{V: 1, Event: decisionlog.EventDecision, Time: time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC),
		Sandbox: "5e6f7a8b", Client: "10.213.0.2:4000", Kind: kind, Method: method, Host: host, Port: port, Path: path,
		Action: action, Enforced: true, Rule: "r1", Reason: "because"}
}

func TestAuditCLI(t *testing.T) {
	dir := t.TempDir()
	v1 := auditLog(t, dir, "v1.jsonl",
		decided("connect", "CONNECT", "api.ext.example", 443, "", "allow"),
		decided("http", "GET", "cdn.ext.example", 80, "/assets/app.js", "allow"),
	)
	v2 := auditLog(t, dir, "v2.jsonl",
		decided("connect", "CONNECT", "api.ext.example", 443, "", "allow"),
		decided("http", "GET", "cdn.ext.example", 80, "/assets/app.js", "allow"),
		decided("transparent", "", "collect.tracker.example", 443, "", "block"),
	)
	bad := writeFile(t, "bad.jsonl", `{"v":1,"event":"decision"}`+"\nnot json\n")

	// The report, text by default.
	out, errOut, code := runCLI(t, "audit", v1)
	if code != 0 || !strings.Contains(out, "api.ext.example:443") || !strings.Contains(out, "Summary: 2 records at 2 targets") {
		t.Errorf("sbx audit v1: exit %d, stdout:\n%s\nstderr: %s", code, out, errOut)
	}
	// --suggest, then --expect of the same log passes, and of v2 fails.
	policy, errOut, code := runCLI(t, "audit", "--suggest", v1)
	if code != 0 {
		t.Fatalf("--suggest: exit %d: %s", code, errOut)
	}
	pfile := writeFile(t, "reviewed.yaml", policy)
	if out, errOut, code := runCLI(t, "policy", "validate", pfile); code != 0 {
		t.Errorf("sbx policy validate of the suggested policy: exit %d\n%s%s\n%s", code, out, errOut, policy)
	}
	if out, errOut, code := runCLI(t, "audit", "--expect", pfile, v1); code != 0 || !strings.Contains(out, "allows all 2 attempts") {
		t.Errorf("--expect of the log it was suggested from: exit %d, want 0\n%s%s", code, out, errOut)
	}
	out, errOut, code = runCLI(t, "audit", "--expect", pfile, v2)
	if code != 1 || !strings.Contains(out, "collect.tracker.example:443") {
		t.Errorf("--expect of v2: exit %d, want 1 naming collect.tracker.example\n%s%s", code, out, errOut)
	}
	// --diff: exit 1 on anything new, 0 the other way round.
	out, errOut, code = runCLI(t, "audit", "--diff", v1, v2)
	if code != 1 || !strings.Contains(out, "collect.tracker.example:443") {
		t.Errorf("--diff v1 v2: exit %d, want 1\n%s%s", code, out, errOut)
	}
	if out, errOut, code := runCLI(t, "audit", "--diff", v2, v1); code != 0 || !strings.Contains(out, "No longer reached") {
		t.Errorf("--diff v2 v1: exit %d, want 0 and what is no longer reached\n%s%s", code, out, errOut)
	}
	// -o writes the file whole, its format from the extension.
	md := filepath.Join(dir, "report.md")
	if _, errOut, code := runCLI(t, "audit", "-o", md, v1, v2); code != 0 {
		t.Errorf("-o report.md: exit %d: %s", code, errOut)
	} else if data, _ := os.ReadFile(md); !strings.HasPrefix(string(data), "## sbx audit") || !strings.Contains(string(data), "| `api.ext.example:443` |") {
		t.Errorf("report.md is not markdown:\n%s", data)
	}
	// --sandbox reads an ended sandbox's log by a prefix of its id.
	logDir := filepath.Join(dir, "logs")
	auditLog(t, logDir, "5e6f7a8b/decisions.jsonl", decided("http", "GET", "only.example", 80, "/", "allow"))
	if out, errOut, code := runCLI(t, "audit", "--log-dir", logDir, "--state-dir", filepath.Join(dir, "state"), "--sandbox", "5e6f", "--format", "json"); code != 0 || !strings.Contains(out, `"host": "only.example"`) {
		t.Errorf("--sandbox 5e6f: exit %d\n%s%s", code, out, errOut)
	}

	// Bad input exits 2 and says what is wrong and where.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", bad}, bad + ":2: not a decision record"},
		{[]string{"audit", filepath.Join(dir, "nope.jsonl")}, "no such file; give a decision log"},
		{[]string{"audit", "firstday"}, "firstday: no such file; for the sandbox firstday give --sandbox firstday"},
		{[]string{"audit", dir}, "is a directory"},
		{[]string{"audit"}, "give decision logs to read"},
		{[]string{"audit", "--expect", bad, v1}, "--expect: "},
		{[]string{"audit", "--suggest", "--expect", pfile, v1}, "give one"},
		{[]string{"audit", "--diff", v1}, "--diff compares two logs"},
		{[]string{"audit", "--format", "pdf", v1}, `--format "pdf"`},
		{[]string{"audit", "--format", "html", "--diff", v1, v2}, "--format html is for the report"},
		{[]string{"audit", "--log-dir", logDir, "--state-dir", filepath.Join(dir, "state"), "--sandbox", "ffff"}, "no running sandbox of that id or name"},
	} {
		out, errOut, code := runCLI(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("sbx %s: exit %d, stderr %q; want exit 2 and %q (stdout %q)", strings.Join(tc.args, " "), code, errOut, tc.want, out)
		}
	}
	// A failed audit leaves no half-written output file.
	if _, _, code := runCLI(t, "audit", "-o", filepath.Join(dir, "never.json"), v1, bad); code != 2 {
		t.Errorf("a bad log among good ones: exit %d, want 2", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "never.json")); err == nil {
		t.Error("a failed audit wrote its output file")
	}
}

// TestAuditStdin reads a log from standard input.
func TestAuditStdin(t *testing.T) {
	r := decided("http", "GET", "stdin.example", 80, "/", "allow")
	var out, errOut strings.Builder
	root := newRootCmd()
	root.SetArgs([]string{"audit", "--format", "json", "-"})
	root.SetIn(strings.NewReader(string(r.AppendJSON(nil)) + "\n"))
	root.SetOut(&out)
	root.SetErr(&errOut)
	if code := execute(t.Context(), root); code != 0 || !strings.Contains(out.String(), `"stdin.example"`) {
		t.Errorf("sbx audit -: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

// TestAuditTruncatedTail: a log whose last line was cut short (a running
// sandbox's) is reported with a warning, fails --expect, and is not bad
// input; a bad line before the end still is.
func TestAuditTruncatedTail(t *testing.T) {
	dir := t.TempDir()
	path := auditLog(t, dir, "running.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"))
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"v":1,"seq":2,"event":"decision","kind":"conn`)
	f.Close()
	policy := writeFile(t, "open.yaml", "version: 1\ndefault: allow\nrules: []\n")
	const why = ":2, the log's last line, ends without a newline and is not a whole record: the log is still being written (a running sandbox)"
	if out, errOut, code := runCLI(t, "audit", path); code != 0 || !strings.Contains(out, "WARNING: "+path+why) {
		t.Errorf("sbx audit of a cut log: exit %d, want 0 and a warning\n%s%s", code, out, errOut)
	}
	if out, errOut, code := runCLI(t, "audit", "--expect", policy, path); code != 1 || !strings.Contains(out, path+why) {
		t.Errorf("--expect of a cut log: exit %d, want 1 and why\n%s%s", code, out, errOut)
	}
	whole := auditLog(t, dir, "whole.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"))
	if out, errOut, code := runCLI(t, "audit", "--diff", whole, path); code != 1 || !strings.Contains(out, why) {
		t.Errorf("--diff against a cut log: exit %d, want 1 and why\n%s%s", code, out, errOut)
	}
	r := decided("http", "GET", "a.example", 80, "/", "allow")
	middle := writeFile(t, "middle.jsonl", `{"v":1,"event":"deci`+"\n"+string(r.AppendJSON(nil)))
	if _, errOut, code := runCLI(t, "audit", middle); code != 2 || !strings.Contains(errOut, middle+":1: not a decision record") {
		t.Errorf("a bad line before the end: exit %d, stderr %q; want 2 and the line", code, errOut)
	}
}

// TestAuditOutputFile: -o replaces a regular file whole, keeping its
// permissions, and refuses a symbolic link.
func TestAuditOutputFile(t *testing.T) {
	dir := t.TempDir()
	log := auditLog(t, dir, "v1.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"))
	private := filepath.Join(dir, "private.txt")
	if err := os.WriteFile(private, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, "audit", "-o", private, log); code != 0 {
		t.Fatalf("-o an existing file: exit %d: %s", code, errOut)
	}
	if fi, err := os.Stat(private); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("-o an existing 0600 file: got %v, %v; want its mode kept", fi.Mode(), err)
	}
	if data, _ := os.ReadFile(private); !strings.HasPrefix(string(data), "sbx audit of") {
		t.Errorf("-o an existing file: got %q, want the report", data)
	}
	target := filepath.Join(dir, "target.txt")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCLI(t, "audit", "-o", link, log); code != 2 || !strings.Contains(errOut, "is a symbolic link: give the path of the file itself") {
		t.Errorf("-o a symbolic link: exit %d, stderr %q; want 2 and a refusal", code, errOut)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("-o a symbolic link replaced it: %v, %v", fi.Mode(), err)
	}
	if data, _ := os.ReadFile(target); string(data) != "keep" {
		t.Errorf("-o a symbolic link wrote its target: %q", data)
	}
	if _, errOut, code := runCLI(t, "audit", "-o", dir, log); code != 2 || !strings.Contains(errOut, "is a directory") {
		t.Errorf("-o a directory: exit %d, stderr %q; want 2", code, errOut)
	}
}

func TestAuditCLIFlags(t *testing.T) {
	dir := t.TempDir()
	v1 := auditLog(t, dir, "v1.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"))
	v2 := auditLog(t, dir, "v2.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"), decided("http", "GET", "new.example", 80, "/", "allow"))
	pfile := writeFile(t, "open.yaml", "version: 1\ndefault: allow\nrules: []\n")
	empty := writeFile(t, "empty.jsonl", "\n")
	logDir := filepath.Join(dir, "logs")
	auditLog(t, logDir, "1111aaaa/decisions.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"))
	auditLog(t, logDir, "2222bbbb/decisions.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"), decided("http", "GET", "new.example", 80, "/", "allow"))
	sbx := []string{"--log-dir", logDir, "--state-dir", filepath.Join(dir, "state")}
	for _, tc := range []struct {
		args     []string
		wantCode int
		want     string // in stderr for exit 2, in stdout otherwise
	}{
		{[]string{"--diff", "-", "-"}, 2, "- (standard input) can be read once"},
		{[]string{"--expect", pfile, v1, empty}, 2, "no decision records in " + empty + ": is this a decision log?"},
		{[]string{"--diff", "--factor", "NaN", v1, v2}, 2, "--factor NaN: want a finite number above 1"},
		{[]string{"--diff", "--factor", "+Inf", v1, v2}, 2, "--factor +Inf: want a finite number above 1"},
		{[]string{"--diff", "--factor", "1", v1, v2}, 2, "--factor 1: want a finite number above 1"},
		{[]string{"--expect", pfile, "-o", filepath.Join(dir, "out.html"), v1}, 2, "out.html: its extension asks for html, which is for the report"},
		{[]string{"--diff", "-o", filepath.Join(dir, "out.htm"), v1, v2}, 2, "out.htm: its extension asks for html"},
		{[]string{"--diff", "--format", "html", v1, v2}, 2, "--format html is for the report"},
		{append([]string{"--diff", "--sandbox", "1111", "--sandbox", "2222"}, sbx...), 1, "new.example:80"},
		{append([]string{"--diff", "--sandbox", "2222", "--sandbox", "1111"}, sbx...), 0, "No longer reached"},
		{append([]string{"--diff", v1, "--sandbox", "2222"}, sbx...), 2, "--diff takes OLD and NEW both as files (or -) or both as --sandbox"},
		{append([]string{"--diff", "--sandbox", "2222"}, sbx...), 2, "--diff compares two logs"},
	} {
		args := append([]string{"audit"}, tc.args...)
		out, errOut, code := runCLI(t, args...)
		got := out
		if tc.wantCode == 2 {
			got = errOut
		}
		if code != tc.wantCode || !strings.Contains(got, tc.want) {
			t.Errorf("sbx %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(args, " "), code, out, errOut, tc.wantCode, tc.want)
		}
	}
}

// numberedLog writes records to a file as the gateway encodes them, with
// the seqs they have, and returns its path.
func numberedLog(t *testing.T, name string, recs ...decisionlog.Record) string {
	t.Helper()
	var b strings.Builder
	for i := range recs {
		b.Write(recs[i].AppendJSON(nil))
		b.WriteByte('\n')
	}
	return writeFile(t, name, b.String())
}

// TestAuditGuardRefusal is the run of the issue: sbx run --allow
// registry.npmjs.org -- npm install, where the name resolved to a
// documentation address and the address guard refused all 11 attempts.
// --expect of the policy it ran under fails and says what exempts the
// address; --suggest writes that allow_private, which sbx policy
// validate accepts and under which --expect of the same log passes.
func TestAuditGuardRefusal(t *testing.T) {
	dir := t.TempDir()
	var recs []decisionlog.Record
	for range 11 {
		r := decided("connect", "CONNECT", "registry.npmjs.org", 443, "", "block")
		r.Rule, r.Reason, r.Status = "guard", decisionlog.ReasonGuard+"192.0.2.1 is documentation (TEST-NET-1)", 403
		r.Addrs = "192.0.2.1"
		recs = append(recs, r)
	}
	log := auditLog(t, dir, "npm.jsonl", recs...)
	run := writeFile(t, "run.yaml", "version: 1\nrules:\n  - {host: registry.npmjs.org, action: allow}\n")
	out, errOut, code := runCLI(t, "audit", "--expect", run, log)
	if code != 1 || !strings.Contains(out, "registry.npmjs.org:443") || !strings.Contains(out, "allow_private: [192.0.2.1/32] exempts it") {
		t.Errorf("--expect of the policy the run failed under: exit %d, want 1 naming allow_private: [192.0.2.1/32]\n%s%s", code, out, errOut)
	}
	policy, errOut, code := runCLI(t, "audit", "--suggest", log)
	if code != 0 || !strings.Contains(policy, "allow_private:\n") || !strings.Contains(policy, "  - \"192.0.2.1/32\"\n") {
		t.Fatalf("--suggest: exit %d, want allow_private with 192.0.2.1/32\n%s%s", code, policy, errOut)
	}
	pfile := writeFile(t, "suggested.yaml", policy)
	if out, errOut, code := runCLI(t, "policy", "validate", pfile); code != 0 {
		t.Errorf("sbx policy validate of the suggested policy: exit %d\n%s%s\n%s", code, out, errOut, policy)
	}
	if out, errOut, code := runCLI(t, "audit", "--expect", pfile, log); code != 0 || !strings.Contains(out, "allows all 11 attempts") {
		t.Errorf("--expect of the suggested policy: exit %d, want 0\n%s%s\n%s", code, out, errOut, policy)
	}
}

// TestAuditSeqGaps: a log whose seqs skip records that no dropped record
// counts is incomplete: --expect and --diff answer 1 and say where. With a
// dropped record that counts the gap they answer 1 for the dropped
// records, and say nothing of a gap.
func TestAuditSeqGaps(t *testing.T) {
	numbered := func(seq uint64) decisionlog.Record {
		r := decided("connect", "CONNECT", "api.ext.example", 443, "", "allow")
		r.Seq = seq
		return r
	}
	dropped := decisionlog.Record{V: 1, Seq: 5, Event: decisionlog.EventDropped, Time: time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC),
		Count: 2, Reason: "over the decision log's rate limit of 1000 records a second (burst 20000)"}
	whole := numberedLog(t, "whole.jsonl", numbered(1), numbered(2), numbered(3))
	policy := writeFile(t, "open.yaml", "version: 1\ndefault: allow\nrules: []\n")
	const gapText = "lacks 2 records that no dropped record accounts for (the first: seqs 3 to 4)"
	tests := []struct {
		name string
		log  string
		code int
		gap  bool
	}{
		{"whole", whole, 0, false},
		{"a gap", numberedLog(t, "gap.jsonl", numbered(1), numbered(2), numbered(5)), 1, true},
		{"a gap a dropped record counts", numberedLog(t, "dropped.jsonl", numbered(1), numbered(2), dropped, numbered(6)), 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, "audit", "--expect", policy, tt.log)
			if code != tt.code || strings.Contains(out, gapText) != tt.gap {
				t.Errorf("--expect: exit %d, want %d, the gap said %v\n%s%s", code, tt.code, tt.gap, out, errOut)
			}
			out, errOut, code = runCLI(t, "audit", "--diff", whole, tt.log)
			if code != tt.code || strings.Contains(out, gapText) != tt.gap {
				t.Errorf("--diff: exit %d, want %d, the gap said %v\n%s%s", code, tt.code, tt.gap, out, errOut)
			}
		})
	}
}

// TestAuditRefusesNonLogs: sbx audit, in each of its modes, refuses a
// file that is not a decision log with exit 2 and the line that shows it
// (FILE:LINE: message, as a policy file's problems are printed): a
// package.json, whose lines are JSON without the "event" every record
// has, an empty file, and a log with a line that is not a record in its
// middle. A log whose last line is cut short (a running sandbox's) is
// read, not refused (TestAuditTruncatedTail).
func TestAuditRefusesNonLogs(t *testing.T) {
	dir := t.TempDir()
	good := auditLog(t, dir, "good.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"))
	r1, r3 := decided("http", "GET", "a.example", 80, "/", "allow"), decided("http", "GET", "b.example", 80, "/", "allow")
	r1.Seq, r3.Seq = 1, 3
	for _, tc := range []struct {
		name, content, want string
	}{
		{"package.json", `{"name": "x", "version": "1.0.0", "scripts": {"test": "node t.js"}}` + "\n", `package.json:1: not a decision record: it has no "event"`},
		{"package.json", "{\n  \"name\": \"x\",\n  \"version\": \"1.0.0\"\n}\n", "package.json:1: not a decision record: "},
		{"empty.jsonl", "", "no decision records in "},
		{"garbage.jsonl", string(r1.AppendJSON(nil)) + "\nGET / HTTP/1.1\n" + string(r3.AppendJSON(nil)) + "\n", "garbage.jsonl:2: not a decision record: "},
	} {
		path := writeFile(t, tc.name, tc.content)
		policy := writeFile(t, "open.yaml", "version: 1\ndefault: allow\nrules: []\n")
		for _, args := range [][]string{
			{"audit", path},
			{"audit", "--suggest", path},
			{"audit", "--expect", policy, path},
			{"audit", "--diff", good, path},
			{"audit", "--format", "json", path},
		} {
			out, errOut, code := runCLI(t, args...)
			if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "sbx: "+path) {
				t.Errorf("sbx %s of %q: got exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, and %q", strings.Join(args, " "), tc.content, code, out, errOut, tc.want)
			}
		}
	}
}

// TestAuditDiffIncompleteVerdict: when --diff exits 1 only because a log
// is incomplete (its last line cut short), its verdict line does not
// claim that the new logs reach something new; the JSON says so in
// found_new, and reaches_new (the exit's reason) stays true.
func TestAuditDiffIncompleteVerdict(t *testing.T) {
	dir := t.TempDir()
	old := auditLog(t, dir, "old.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"))
	cut := auditLog(t, dir, "cut.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"))
	f, err := os.OpenFile(cut, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"v":1,"seq":2,"event":"decision","kind":"conn`)
	f.Close()
	out, errOut, code := runCLI(t, "audit", "--diff", old, cut)
	if code != exitFailure || strings.Contains(out, "reach something the old ones do not") || !strings.Contains(out, "Nothing new is seen in what the logs hold, but they are incomplete") {
		t.Errorf("--diff against a cut log with nothing new: got exit %d, stdout:\n%s\nstderr %q; want exit 1 and a verdict that claims no new reach", code, out, errOut)
	}
	out, _, code = runCLI(t, "audit", "--diff", "--format", "json", old, cut)
	if code != exitFailure || !strings.Contains(out, `"reaches_new": true`) || !strings.Contains(out, `"found_new": false`) {
		t.Errorf("--diff --format json against a cut log: got exit %d, stdout:\n%s\nwant exit 1, reaches_new true and found_new false", code, out)
	}
	newer := auditLog(t, dir, "newer.jsonl", decided("http", "GET", "a.example", 80, "/", "allow"), decided("http", "GET", "b.example", 80, "/", "allow"))
	if out, _, code := runCLI(t, "audit", "--diff", old, newer); code != exitFailure || !strings.Contains(out, "The new logs reach something the old ones do not.") {
		t.Errorf("--diff with a new target: got exit %d, stdout:\n%s\nwant exit 1 and the claim", code, out)
	}
}
