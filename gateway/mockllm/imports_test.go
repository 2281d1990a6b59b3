package mockllm

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// allowedImports are the packages outside the standard library that the
// package itself may import: of sbx only the strict decoder it shares
// with policy files (the gateway imports this package), the WebSocket
// library for the Responses API's WebSocket mode, and the SDKs only in
// tests.
var allowedImports = map[string]bool{"go.yaml.in/yaml/v3": true, "github.com/sbx-dev/sbx/netpolicy/strictyaml": true, "github.com/coder/websocket": true}

func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			std := !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
			if !std && !allowedImports[path] {
				t.Errorf("%s imports %s; mockllm imports the standard library, go.yaml.in/yaml/v3, github.com/coder/websocket and netpolicy/strictyaml only", name, path)
			}
		}
	}
}
