package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const modulePath = "github.com/sbx-dev/sbx"

// layers are the import rules of docs/architecture.md: the packages of this module
// each library package may depend on, directly or not. cmd/sbx may import
// anything; it is the only place that wires packages together.
var layers = []struct {
	pkg     string   // relative to the module
	allowed []string // module packages it may depend on
	rule    string   // the rule, for failure messages
}{
	{"netpolicy", []string{"netpolicy/strictyaml"}, "netpolicy imports nothing else of sbx but its strict document decoder"},
	{"netpolicy/strictyaml", nil, "the strict decoder of policy files and mock LLM scripts imports no sbx package"},
	{"gateway/mockllm", []string{"netpolicy/strictyaml"}, "the mock LLM imports only the strict decoder it shares with policy files"},
	{"gateway", []string{"netpolicy", "netpolicy/strictyaml", "gateway/api", "gateway/approval", "gateway/decisionlog", "gateway/dnsstub", "gateway/mockllm", "gateway/login", "gateway/secrets", "gateway/secretscrub"}, "gateway imports netpolicy, the management API, the approvals, the decision log, the DNS stub, the mock LLM, the logins, the secrets and their scrubber only"},
	{"gateway/dnsstub", []string{"netpolicy", "netpolicy/strictyaml", "gateway/decisionlog"}, "the DNS stub imports netpolicy and the decision log only, never gateway, which hands it what it needs of the gateway (dnsstub.Gateway)"},
	{"gateway/approval", []string{"netpolicy", "netpolicy/strictyaml", "gateway/decisionlog"}, "the approvals (questions, answers, the rules answers add) import netpolicy and the decision log only: the gateway hands them what they need of it (approval.Gateway), and the management API serves their types"},
	{"gateway/api", []string{"netpolicy", "netpolicy/strictyaml", "gateway/approval", "gateway/decisionlog", "gateway/mockllm"}, "the management API (wire types, client, server) imports netpolicy, the approvals (whose types it serves), the decision log and the mock LLM at most, never the gateway, which hands the server what it acts on (api.Gateway): any program can talk to a gateway without linking one"},
	{"gateway/decisionlog", nil, "the decision log (records, codec, and the writer: Log, its sinks, the ring) imports no other sbx package: every reader and writer can use it"},
	{"gateway/dnsstub/dnsstubtest", nil, "the DNS stub tests' query builder and exchanges import no sbx package, so that dnsstub's own tests and the gateway's can use them"},
	{"gateway/decisionlog/decisionlogtest", nil, "the decision log tests' helpers import no sbx package, so that decisionlog's own tests can use them"},
	{"gateway/audit", []string{"netpolicy", "netpolicy/strictyaml", "gateway/decisionlog", "gateway/escape"}, "audit reads logs and decides with netpolicy, and shows their text with escape; it never runs a gateway"},
	{"gateway/ui", []string{"gateway/api", "gateway/approval", "gateway/audit", "gateway/decisionlog", "gateway/mockllm", "netpolicy", "netpolicy/strictyaml", "gateway/escape"}, "the web view reads sandboxes through the management API and their logs through audit; it never runs a gateway, and finds sandboxes through the Sandboxes its caller gives it"},
	{"sandbox", nil, "sandbox takes plain values and imports no other sbx package"},
	{"sandbox/run", []string{"sandbox", "gateway", "gateway/api", "gateway/approval", "gateway/decisionlog", "gateway/dnsstub", "gateway/mockllm", "gateway/login", "gateway/secrets", "gateway/secretscrub", "rootfs", "netpolicy", "netpolicy/strictyaml"}, "the run library composes sandbox, gateway and rootfs, and nothing of cmd/sbx"},
	{"sandbox/selftest", []string{"sandbox/run", "sandbox", "gateway", "gateway/api", "gateway/approval", "gateway/decisionlog", "gateway/dnsstub", "gateway/mockllm", "gateway/login", "gateway/secrets", "gateway/secretscrub", "rootfs", "netpolicy", "netpolicy/strictyaml", "gateway/escape"}, "the selftest makes its sandboxes through the run library, shows what came from them with escape, and imports nothing of cmd/sbx"},
	{"gateway/secrets", []string{"netpolicy", "netpolicy/strictyaml", "gateway/decisionlog", "gateway/secretscrub"}, "the secrets (bindings, where a value may go, injection, redaction, the scrubbing of answers) import netpolicy, the decision log's record and the scrubber, never the gateway: the gateway holds a Set and asks it"},
	{"gateway/login", []string{"netpolicy", "netpolicy/strictyaml", "gateway/decisionlog", "gateway/secrets", "gateway/secretscrub"}, "the logins kept outside (credential files, placeholders, the refresh) import the secrets, through which their tokens go, and the decision log's record, never the gateway"},
	{"gateway/secretscrub", nil, "the secrets' scrubber imports no sbx package: it knows values and placeholders, not the gateway"},
	{"gateway/escape", nil, "escape, the one escaping function for text, imports no sbx package: every printer can use it"},
	{"sandbox/kube/podnet", []string{"gateway", "gateway/handoff", "gateway/api", "gateway/approval", "gateway/decisionlog", "gateway/dnsstub", "gateway/mockllm", "gateway/login", "gateway/secrets", "gateway/secretscrub", "netpolicy", "netpolicy/strictyaml"}, "the agent pod's rules and capture shim import the gateway (for OriginalDst) with what it imports, and the handoff header; nothing of sandbox or cmd/sbx"},
	{"rootfs", nil, "rootfs imports no other sbx package"},
	{"sandbox/kube", []string{"sandbox"}, "sandbox/kube takes plain values and imports only sandbox; it never runs a gateway"},
	{"gateway/handoff", nil, "gateway/handoff imports no sbx package: the shim and the gateway share it"},
	{"sandbox/sandboxtest", nil, "the tests' image and registry helpers import no sbx package"},
}

// goTool returns the go command of the toolchain running the test.
func goTool(t *testing.T) string {
	t.Helper()
	// go test puts the toolchain's own go command first on PATH.
	p, err := exec.LookPath("go")
	if err != nil {
		p = "/usr/local/go/bin/go"
		if _, serr := os.Stat(p); serr != nil {
			t.Fatalf("no go command to list packages with: %v", err)
		}
	}
	return p
}

// goCmd runs the go command in the module's root, with env added to the
// environment, and returns its stdout.
func goCmd(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(goTool(t), args...)
	cmd.Dir = moduleRoot(t)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// moduleRoot returns the directory of the module's go.mod: the test runs in
// cmd/sbx.
func moduleRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// hasGoFiles reports whether the package directory ./pkg holds any Go
// file, for any platform or only tests. A package that does not exist yet
// has none.
func hasGoFiles(t *testing.T, pkg string) bool {
	t.Helper()
	out := goCmd(t, nil, "list", "-e", "-f",
		"{{len .GoFiles}} {{len .CgoFiles}} {{len .IgnoredGoFiles}} {{len .TestGoFiles}} {{len .XTestGoFiles}}",
		"./"+pkg)
	for _, n := range strings.Fields(out) {
		if n != "0" {
			return true
		}
	}
	return false
}

// layeringGOOS are the platforms whose imports TestLayering checks: the
// dependencies of a package differ by its _linux.go and other files.
var layeringGOOS = []string{"linux", "darwin"}

func TestLayering(t *testing.T) {
	for _, l := range layers {
		t.Run(l.pkg, func(t *testing.T) {
			if !hasGoFiles(t, l.pkg) {
				t.Skipf("package %s does not exist yet", l.pkg)
			}
			for _, goos := range layeringGOOS {
				checkLayer(t, l.pkg, l.allowed, l.rule, goos)
			}
		})
	}
}

// checkLayer reports every package of the module that pkg depends on, on
// goos, and that allowed does not list.
func checkLayer(t *testing.T, pkg string, allowed []string, rule, goos string) {
	t.Helper()
	// Every dependency with its direct imports, to show the chain by which
	// a forbidden package is reached.
	out := goCmd(t, []string{"GOOS=" + goos}, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./"+pkg)
	imports := map[string][]string{}
	var deps []string
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		deps = append(deps, fields[0])
		imports[fields[0]] = fields[1:]
	}
	self := modulePath + "/" + pkg
	if !slices.Contains(deps, self) {
		t.Fatalf("GOOS=%s go list -deps ./%s does not list %s itself; is the module path %s?", goos, pkg, self, modulePath)
	}
	for _, dep := range deps {
		rel, ok := strings.CutPrefix(dep, modulePath+"/")
		if !ok || dep == self || slices.Contains(allowed, rel) {
			continue
		}
		t.Errorf("rule %q broken on %s: %s depends on %s, by the imports %s",
			rule, goos, pkg, rel, strings.Join(importChain(imports, self, dep), " -> "))
	}
}

// importChain returns the shortest chain of imports from one package to
// another (breadth first over the imports go list reported).
func importChain(imports map[string][]string, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append(chain, strings.TrimPrefix(p, modulePath+"/"))
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range imports[p] {
			if _, seen := prev[next]; !seen {
				prev[next] = p
				queue = append(queue, next)
			}
		}
	}
	return []string{from, "?", to}
}

// TestPackageDocs checks that every package of the module has exactly one
// file with a package doc comment (STYLE.md), counting the files of every
// platform but not tests.
func TestPackageDocs(t *testing.T) {
	out := goCmd(t, nil, "list", "-e", "-f",
		"{{.ImportPath}}\t{{.Dir}}\t{{join .GoFiles \" \"}} {{join .CgoFiles \" \"}} {{join .IgnoredGoFiles \" \"}}",
		"./...")
	for line := range strings.Lines(out) {
		pkg, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		dir, files, _ := strings.Cut(rest, "\t")
		var withDoc []string
		fset := token.NewFileSet()
		for _, name := range strings.Fields(files) {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				t.Errorf("%s: %v", pkg, err)
				continue
			}
			if f.Doc != nil {
				withDoc = append(withDoc, name)
			}
		}
		switch len(withDoc) {
		case 1:
		case 0:
			t.Errorf("package %s has no package doc comment; write one (in doc.go when it is long)", pkg)
		default:
			t.Errorf("package %s has package doc comments in %d files (%s); keep exactly one, in %s",
				pkg, len(withDoc), strings.Join(withDoc, ", "), pickDocFile(withDoc))
		}
	}
}

// pickDocFile suggests the file to keep the package doc in.
func pickDocFile(files []string) string {
	if slices.Contains(files, "doc.go") {
		return "doc.go"
	}
	return files[0]
}

// TestDocsNameRealTests: every test or fuzz target README.md,
// SECURITY.md and docs/*.md name as showing a promise exists, so a renamed or removed
// test cannot leave a promise without its proof. ("TestPrivileged*" names
// the family.)
func TestDocsNameRealTests(t *testing.T) {
	root := moduleRoot(t)
	var sources strings.Builder
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources.Write(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`\b(?:Test|Fuzz)[A-Z][A-Za-z0-9_]*`)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range docs {
		docs[i], _ = filepath.Rel(root, d)
	}
	for _, doc := range append([]string{"README.md", "SECURITY.md"}, docs...) {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range name.FindAllString(string(data), -1) {
			if n == "TestPrivileged" {
				continue
			}
			if !strings.Contains(sources.String(), "func "+n+"(") {
				t.Errorf("%s names %s, which no test file defines", doc, n)
			}
		}
	}
}

// maxCLIFunctionLines is the longest a function of cmd/sbx may be: a
// command maps flags to an options struct, calls one library function
// and writes its output; what is longer holds logic that belongs in a
// library.
const maxCLIFunctionLines = 80

// longFunctionsAllowed are the files of cmd/sbx whose functions may be
// longer, for a time: none today. A file put here needs a reason beside it
// and a plan to move its logic into a library.
var longFunctionsAllowed = []string{}

// TestCLIFunctionsAreShort: no function in cmd/sbx's non-test files, of
// any platform, is longer than maxCLIFunctionLines, but in the files
// longFunctionsAllowed names.
func TestCLIFunctionsAreShort(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || slices.Contains(longFunctionsAllowed, name) {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > maxCLIFunctionLines {
				t.Errorf("%s:%d: %s is %d lines, want at most %d: keep flag mapping and output here, and move the rest to its library", name, start.Line, fd.Name.Name, n, maxCLIFunctionLines)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no Go files of cmd/sbx found to check")
	}
}
