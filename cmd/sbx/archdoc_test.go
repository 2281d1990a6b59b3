package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// update rewrites the generated parts of the docs (the import rules of
// docs/architecture.md, the flag tables of docs/cli.md) from the code,
// instead of comparing them: go test ./cmd/sbx -run 'TestArchitectureDocIsTrue|TestCLIDocFlags' -update.
var update = flag.Bool("update", false, "rewrite the generated parts of docs/architecture.md and docs/cli.md")

// notLayered are the packages of the module that have no entry in
// layers, each with the reason: every other package must have one, so a
// new package cannot escape TestLayering.
var notLayered = map[string]string{
	"cmd/sbx": "it may import anything: it is the only place that wires packages together",
	// The scripts' programs are named in the "scripts/" row of the
	// package table instead (scriptPrograms).
}

// isScriptProgram reports whether pkg is one of the small programs the
// scripts build (scripts/NAME), which the package table names in its
// "scripts/" row rather than in a row each, and which import what they
// like, as cmd/sbx does.
func isScriptProgram(pkg string) bool {
	return strings.HasPrefix(pkg, "scripts/")
}

// modulePackages returns the packages of the module, relative to it.
func modulePackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	for line := range strings.Lines(goCmd(t, nil, "list", "./...")) {
		if pkg := strings.TrimPrefix(strings.TrimSpace(line), modulePath+"/"); pkg != "" {
			pkgs = append(pkgs, pkg)
		}
	}
	return pkgs
}

// Markers of the generated import rules in docs/architecture.md.
const (
	layersBegin = "<!-- layers: generated from the layers of cmd/sbx/layering_test.go, the rules TestLayering enforces; go test ./cmd/sbx -run TestArchitectureDocIsTrue -update rewrites it -->"
	layersEnd   = "<!-- end layers -->"
)

// renderLayers renders layers as the table of docs/architecture.md's
// "Who may import whom": one row per package, in the order of layers.
func renderLayers() string {
	var b strings.Builder
	b.WriteString("| package | may depend on, of sbx | the rule |\n|---|---|---|\n")
	for _, l := range layers {
		allowed := "no sbx package"
		if len(l.allowed) > 0 {
			names := make([]string, len(l.allowed))
			for i, a := range l.allowed {
				names[i] = "`" + a + "`"
			}
			allowed = strings.Join(names, ", ")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", l.pkg, allowed, strings.ReplaceAll(l.rule, "|", `\|`))
	}
	return b.String()
}

// generatedSection returns what doc holds between the lines begin and
// end, and doc with want put there instead.
func generatedSection(doc, begin, end, want string) (got, updated string, err error) {
	before, rest, ok := strings.Cut(doc, begin+"\n")
	if !ok {
		return "", "", fmt.Errorf("no line %q", begin)
	}
	got, after, ok := strings.Cut(rest, end+"\n")
	if !ok {
		return "", "", fmt.Errorf("no line %q after %q", end, begin)
	}
	return got, before + begin + "\n" + want + end + "\n" + after, nil
}

// TestArchitectureDocIsTrue keeps docs/architecture.md true to the code:
//   - its import rules are the layers TestLayering enforces, generated
//     between the layers markers (-update rewrites them);
//   - every package of the module has an entry in layers, but those
//     notLayered names and the scripts' programs;
//   - every package has a row in the package table ("| `pkg` | ..."), the
//     scripts' programs a mention in the "scripts/" row, and the table
//     names no package that does not exist;
//   - every identifier the page names as pkg.Name exists in that package,
//     and every page it links to exists.
func TestArchitectureDocIsTrue(t *testing.T) {
	path := filepath.Join(moduleRoot(t), "docs", "architecture.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	want := renderLayers()
	got, updated, err := generatedSection(text, layersBegin, layersEnd, want)
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	if *update && got != want {
		if err := os.WriteFile(path, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the import rules of docs/architecture.md")
		text = updated
	} else if got != want {
		t.Errorf("docs/architecture.md's import rules differ from cmd/sbx/layering_test.go's layers (-doc +layers; go test ./cmd/sbx -run TestArchitectureDocIsTrue -update rewrites them):\n%s", cmp.Diff(strings.Split(got, "\n"), strings.Split(want, "\n")))
	}

	pkgs := modulePackages(t)
	checkEveryPackageLayered(t, pkgs)
	checkPackageTable(t, text, pkgs)
	checkQualifiedNames(t, text, pkgs)
	checkLinks(t, "docs/architecture.md", text)
}

// checkEveryPackageLayered reports every package of pkgs without an entry
// in layers, but those notLayered names and the scripts' programs, and
// every entry in layers for a package that pkgs lacks.
func checkEveryPackageLayered(t *testing.T, pkgs []string) {
	t.Helper()
	var layered []string
	for _, l := range layers {
		layered = append(layered, l.pkg)
		if !slices.Contains(pkgs, l.pkg) {
			t.Errorf("layers has an entry for %s, which is not a package of the module", l.pkg)
		}
	}
	for _, pkg := range pkgs {
		if _, ok := notLayered[pkg]; ok || isScriptProgram(pkg) || slices.Contains(layered, pkg) {
			continue
		}
		t.Errorf("package %s has no entry in cmd/sbx/layering_test.go's layers: add the sbx packages it may depend on and its rule (and go test ./cmd/sbx -run TestArchitectureDocIsTrue -update puts it in docs/architecture.md)", pkg)
	}
}

// checkPackageTable reports every package of pkgs without a row in the
// package table of text (its section "## Packages") (a scripts' program: without its name in the
// "scripts/" row), and every row for a package pkgs lacks.
func checkPackageTable(t *testing.T, text string, pkgs []string) {
	t.Helper()
	_, section, ok := strings.Cut(text, "\n## Packages\n")
	if !ok {
		t.Fatal("docs/architecture.md has no section \"## Packages\"")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z/]+)` \\| (.*) \\|$").FindAllStringSubmatch(section, -1) {
		rows[m[1]] = m[2]
	}
	for _, pkg := range pkgs {
		if isScriptProgram(pkg) {
			name := strings.TrimPrefix(pkg, "scripts/")
			if !strings.Contains(rows["scripts/"], "`"+name+"`") {
				t.Errorf("docs/architecture.md's \"scripts/\" row does not name the program %s (as `%s`)", pkg, name)
			}
			continue
		}
		if strings.TrimSpace(rows[pkg]) == "" {
			t.Errorf("docs/architecture.md's package table has no row for %s saying what it owns", pkg)
		}
	}
	for pkg := range rows {
		if !slices.Contains(pkgs, pkg) && pkg != "scripts/" && pkg != "docs/examples/" {
			t.Errorf("docs/architecture.md's package table names %s, which is not a package of the module", pkg)
		}
	}
}

// checkQualifiedNames reports every pkg.Name in text (pkg the last element
// of a library package's path, Name exported) that the package does not
// declare: a name that moved or was renamed.
func checkQualifiedNames(t *testing.T, text string, pkgs []string) {
	t.Helper()
	dirs := map[string]string{} // package name -> its directory
	for _, pkg := range pkgs {
		if _, ok := notLayered[pkg]; ok || isScriptProgram(pkg) {
			continue
		}
		dirs[filepath.Base(pkg)] = pkg
	}
	declared := map[string][]string{}
	for _, m := range regexp.MustCompile(`\b([a-z]+)\.([A-Z][A-Za-z0-9_]*)`).FindAllStringSubmatch(text, -1) {
		pkg, ok := dirs[m[1]]
		if !ok {
			continue
		}
		if _, ok := declared[pkg]; !ok {
			declared[pkg] = topLevelNames(t, filepath.Join(moduleRoot(t), pkg))
		}
		if !slices.Contains(declared[pkg], m[2]) {
			t.Errorf("docs/architecture.md names %s.%s, which package %s does not declare", m[1], m[2], pkg)
		}
	}
}

// topLevelNames returns the names the package in dir declares at its top
// level, in its non-test files of every platform.
func topLevelNames(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names = append(names, s.Name.Name)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names = append(names, n.Name)
						}
					}
				}
			}
		}
	}
	return names
}

// checkLinks reports every relative link of the page doc (text) to a file
// that does not exist.
func checkLinks(t *testing.T, doc, text string) {
	t.Helper()
	dir := filepath.Join(moduleRoot(t), filepath.Dir(doc))
	for _, m := range regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(text, -1) {
		if _, err := os.Stat(filepath.Join(dir, m[1])); err != nil {
			t.Errorf("%s links to %s, which does not exist", doc, m[1])
		}
	}
}
