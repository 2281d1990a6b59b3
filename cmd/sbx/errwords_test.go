package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-multierror"

	"github.com/sbx-dev/sbx/gateway"
	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/rootfs"
	"github.com/sbx-dev/sbx/sandbox"
	"github.com/sbx-dev/sbx/sandbox/run"
)

// TestCLIMessage: the libraries' typed errors, wrapped as they come back,
// are said with sbx's flags and commands, word for word as sbx said them
// when the libraries wrote the flags themselves; the error stays
// errors.As-able.
func TestCLIMessage(t *testing.T) {
	_, _, static := gateway.ParseStatic("api.test")
	_, _, badIP := gateway.ParseStatic("a.test=nowhere")
	tests := []struct {
		err  error
		want string
	}{
		{static, `--resolve "api.test": want HOST=IP, e.g. --resolve api.test=203.0.113.7`},
		{badIP, `--resolve "a.test=nowhere": "nowhere" is not an IP address`},
		{fmt.Errorf("starting the gateway: %w", &decisionlog.UnsafeLogFileError{Path: "/x/y", Type: os.ModeSymlink}),
			"starting the gateway: decision log /x/y: is a symbolic link; sbx never follows one there (a sandbox could have planted it): remove it or choose another --log path"},
		{&decisionlog.UnsafeLogFileError{Path: "/x/y", Type: os.ModeDir},
			"decision log /x/y: is a directory: name a file in it, or choose another --log path"},
		{&decisionlog.NonEmptyLogFileError{Path: "/x/y", Size: 12},
			"decision log /x/y: holds 12 bytes already (an earlier run's records?), and sbx does not add to a log unless asked: choose another --log path, or give --log-append to add this run's records to it"},
		{fmt.Errorf("reserving a subnet: %w", &sandbox.PoolExhaustedError{Pool: netip.MustParsePrefix("10.213.0.0/28")}),
			"reserving a subnet: every /30 of 10.213.0.0/28 is in use (run sbx gc to free leftovers of crashed runs, or give --subnet-pool a larger network): subnet pool exhausted"},
		{&sandbox.NotFoundError{}, "no sandbox given: no such sandbox (sbx ps lists the running ones)"},
		{&sandbox.NotFoundError{Ref: "ab"}, `no running sandbox has the id, name or id prefix "ab": no such sandbox (sbx ps lists them)`},
		{&sandbox.NotFoundError{Ref: "abcd1234", ID: true}, "sandbox abcd1234: no such sandbox (sbx ps lists the running ones)"},
		{&sandbox.RecordKeptError{Runtime: "containerd", Address: "/run/c.sock", Container: "sbx-1", Err: errors.New("connection refused")},
			"containerd at /run/c.sock keeps a record of container sbx-1, whose processes sbx killed without it (sbx gc removes the record once containerd answers): connection refused"},
		{&rootfs.NotDirError{Dir: "/no/such"}, "--rootfs /no/such is not a directory"},
		{&rootfs.SystemWorkDirError{Dir: "/usr"}, "the working directory /usr would be shared read-write with the sandbox; run sbx from a project directory, or give -w"},
		{errors.New("nothing to word"), "nothing to word"},
	}
	for _, tt := range tests {
		if got := cliMessage(tt.err); got != tt.want {
			t.Errorf("cliMessage(%q):\ngot  %q\nwant %q", tt.err, got, tt.want)
		}
		worded := cliError(tt.err)
		if got := worded.Error(); got != tt.want || !errors.Is(worded, tt.err) {
			t.Errorf("cliError(%q) = %q (wrapping it: %v), want %q wrapping it", tt.err, got, errors.Is(worded, tt.err), tt.want)
		}
	}
}

// TestSecretFileWords: a secret's value file the sandbox can read, or
// whose reach cannot be told, is said with where to keep it instead.
func TestSecretFileWords(t *testing.T) {
	for _, tt := range []struct {
		reason error
		fix    string
	}{
		{&run.ReadableError{}, ": keep the file where the sandbox sees nothing: out of the working directory, of -v volumes (read-only ones too), of the --rootfs directory and, with --rootfs host, of the system directories it shows (/usr, /etc, /opt and the like) and of the home --home or --agent shows, e.g. in your home directory outside the working directory with the default --home empty"},
		{fs.ErrPermission, ": give a file sbx can look at, where the sandbox sees nothing: out of the working directory, of -v volumes (read-only ones too), of the --rootfs directory and, with --rootfs host, of the system directories it shows (/usr, /etc, /opt and the like) and of the home --home or --agent shows, e.g. in your home directory outside the working directory with the default --home empty"},
	} {
		err := fmt.Errorf("starting: %w", &run.SecretFileError{Name: "K", Path: "/etc/k", Reason: tt.reason})
		lib := err.Error()
		if got := cliMessage(err); got != lib+tt.fix {
			t.Errorf("cliMessage(%q):\ngot  %q\nwant %q", err, got, lib+tt.fix)
		}
	}
}

// TestReportErrorWords: reportError words each error a *multierror.Error
// combines, one line each.
func TestReportErrorWords(t *testing.T) {
	err := multierror.Append(&sandbox.NotFoundError{Ref: "ab"}, &rootfs.NotDirError{Dir: "/no/such"})
	var out bytes.Buffer
	reportError(&out, &exitError{code: exitFailure, err: err})
	want := `sbx: no running sandbox has the id, name or id prefix "ab": no such sandbox (sbx ps lists them)
sbx: --rootfs /no/such is not a directory
`
	if out.String() != want {
		t.Errorf("reportError printed\n%s\nwant\n%s", out.String(), want)
	}
}

// libraryErrorWords are the error messages of the library packages that
// name an sbx command or flag on purpose, each with why.
var libraryErrorWords = map[string]string{
	// A policy change comes over the management API, whose client is
	// told the fix as text: sbx's policy and mock commands say it as the
	// gateway words it.
	"gateway/mock.go:checkLLMScripts": "the management API's answer to a policy change, which names the fix",
	// A bug in the audit command's own suggestion, said as such.
	"gateway/audit/suggest.go:Suggest": "names the command whose bug it is, not a fix",
}

// flagOrCommand is a CLI flag or an sbx command in a message.
var flagOrCommand = regexp.MustCompile(`(^|[^a-z0-9-])--[a-z]|\bsbx (audit|decisions|gc|gateway|image|mock|policy|ps|run|selftest|stop|version)\b`)

// TestLibraryErrorsNameNoFlags: the library packages' errors (what
// fmt.Errorf and errors.New make, and what Error methods say) name no
// flag of sbx and no sbx command, but for libraryErrorWords: the libraries
// return typed errors with the facts, and cmd/sbx words them
// (cliMessage). Nor do they, or cmd/sbx, combine errors with errors.Join:
// go-multierror is the module's one way, which reportError says one line
// each.
func TestLibraryErrorsNameNoFlags(t *testing.T) {
	root := moduleRoot(t)
	seen := map[string]bool{}
	for _, dir := range []string{"gateway", "netpolicy", "sandbox", "rootfs", "cmd/sbx"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "scripts") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			checkLibraryErrors(t, token.NewFileSet(), path, filepath.ToSlash(rel), seen, dir != "cmd/sbx")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for site := range libraryErrorWords {
		if !seen[site] {
			t.Errorf("%s is listed in libraryErrorWords but names no flag or command: take it off the list", site)
		}
	}
}

// checkLibraryErrors checks the file at path (rel to the module) for
// TestLibraryErrorsNameNoFlags, and marks in seen the allowed sites it
// found: its words only when library is set (cmd/sbx words errors with
// flags), errors.Join always.
func checkLibraryErrors(t *testing.T, fset *token.FileSet, path, rel string, seen map[string]bool, library bool) {
	t.Helper()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	literals := func(fn string, n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !flagOrCommand.MatchString(s) {
				return true
			}
			site := rel + ":" + fn
			if _, ok := libraryErrorWords[site]; ok {
				seen[site] = true
				return true
			}
			t.Errorf("%s: an error of %s says %q: return a typed error with the facts, and word it in cmd/sbx (errwords.go)", fset.Position(lit.Pos()), site, s)
			return true
		})
	}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		if library && fd.Recv != nil && fd.Name.Name == "Error" {
			literals(fd.Name.Name, fd.Body)
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			switch pkg.Name + "." + sel.Sel.Name {
			case "fmt.Errorf", "errors.New":
				if !library {
					break
				}
				for _, a := range call.Args {
					literals(fd.Name.Name, a)
				}
			case "errors.Join":
				t.Errorf("%s: %s combines errors with errors.Join: use multierror.Append", fset.Position(call.Pos()), rel)
			}
			return true
		})
	}
}
