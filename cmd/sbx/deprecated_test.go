package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoDeprecatedDockerClient: no Go file of the module (tests too) uses
// a function, variable, constant or type that the Docker client the module
// builds with (github.com/moby/moby/client) marks Deprecated, as
// staticcheck's SA1019 would say.
func TestNoDeprecatedDockerClient(t *testing.T) {
	const clientPath = "github.com/moby/moby/client"
	dir := strings.TrimSpace(goCmd(t, nil, "list", "-m", "-f", "{{.Dir}}", clientPath))
	deprecated := deprecatedNames(t, dir)
	if len(deprecated) == 0 {
		t.Fatalf("found nothing deprecated in %s: the test cannot tell", dir)
	}
	root := moduleRoot(t)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		name := "" // the file's name for the client package
		for _, imp := range f.Imports {
			if imp.Path.Value == `"`+clientPath+`"` {
				name = "client"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == name {
				if why, ok := deprecated[sel.Sel.Name]; ok {
					t.Errorf("%s: %s.%s is deprecated: %s", fset.Position(sel.Pos()), name, sel.Sel.Name, why)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// deprecatedNames returns the package-level names of the Go package in
// dir whose doc comment has a "Deprecated:" paragraph, with it.
func deprecatedNames(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	note := func(name string, doc *ast.CommentGroup) {
		if doc == nil {
			return
		}
		if _, why, ok := strings.Cut(doc.Text(), "Deprecated: "); ok {
			out[name], _, _ = strings.Cut(why, "\n\n")
		}
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					note(d.Name.Name, d.Doc)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						doc := s.Doc
						if doc == nil && len(d.Specs) == 1 {
							doc = d.Doc
						}
						note(s.Name.Name, doc)
					case *ast.ValueSpec:
						doc := s.Doc
						if doc == nil && len(d.Specs) == 1 {
							doc = d.Doc
						}
						for _, n := range s.Names {
							note(n.Name, doc)
						}
					}
				}
			}
		}
	}
	return out
}
