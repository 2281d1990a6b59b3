package mockllm

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite docs/mock-llm.md's table of script fields from Fields")

// TestFieldsDocumented: Fields documents every field of the script
// types (by their Go names in snake case) and every field the decoder
// reads, and nothing else, each after the field it is part of.
func TestFieldsDocumented(t *testing.T) {
	var documented []string
	seen := map[string]bool{}
	for _, f := range Fields {
		if f.Type == "" || f.Default == "" || f.Doc == "" || strings.ContainsAny(f.Doc, "\n") {
			t.Errorf("%s: got type %q, default %q, doc %q; want all three, the doc on one line", f.Path, f.Type, f.Default, f.Doc)
		}
		if i := strings.LastIndexByte(f.Path, '.'); i > 0 && !seen[strings.TrimSuffix(f.Path[:i], "[]")] {
			t.Errorf("%s comes before the field it is part of, %s", f.Path, f.Path[:i])
		}
		seen[f.Path] = true
		documented = append(documented, f.Path)
	}
	slices.Sort(documented)

	var typed []string
	walkFields(reflect.TypeFor[Script](), "", &typed)
	slices.Sort(typed)
	if diff := cmp.Diff(typed, documented); diff != "" {
		t.Errorf("the script types' fields (-) and Fields (+) differ; document each field in Fields:\n%s", diff)
	}

	var decoded []string
	for prefix, names := range map[string][]string{
		"":                            scriptFields,
		"turns[].":                    turnFields,
		"turns[].match.":              matchFields,
		"turns[].reply.":              replyFields,
		"turns[].reply.tool_calls[].": toolCallFields,
		"turns[].reply.usage.":        usageFields,
		"turns[].reply.raw.":          rawFields,
		"turns[].fault.":              faultFields,
	} {
		for _, n := range names {
			decoded = append(decoded, prefix+n)
		}
	}
	slices.Sort(decoded)
	if diff := cmp.Diff(decoded, documented); diff != "" {
		t.Errorf("the fields the decoder reads (-) and Fields (+) differ; document each field in Fields:\n%s", diff)
	}
}

// walkFields adds the paths of typ's fields under prefix, as a script
// names them: the Go name in snake case; Turn.Origin is not written in
// scripts.
func walkFields(typ reflect.Type, prefix string, paths *[]string) {
	for f := range typ.Fields() {
		if !f.IsExported() || typ == reflect.TypeFor[Turn]() && f.Name == "Origin" {
			continue
		}
		path := prefix + snake(f.Name)
		*paths = append(*paths, path)
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			walkFields(ft, path+".", paths)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			walkFields(ft.Elem(), path+"[].", paths)
		}
	}
}

// snake turns a Go name into a script's: ChunkDelayMS is chunk_delay_ms.
func snake(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{"Turns": "turns", "ID": "id", "UserRegexp": "user_regexp", "ChunkDelayMS": "chunk_delay_ms", "DisconnectAfterBytes": "disconnect_after_bytes"} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q): got %q, want %q", in, got, want)
		}
	}
}

// Markers around the generated table in docs/mock-llm.md.
const (
	docsFile       = "../../docs/mock-llm.md"
	docsTableStart = "<!-- script fields: made by gateway/mockllm.FieldMarkdown; go test ./gateway/mockllm -run TestFieldsInDocs -update rewrites it -->\n"
	docsTableEnd   = "<!-- end of script fields -->\n"
)

// TestFieldsInDocs: docs/mock-llm.md holds FieldMarkdown's table as it
// is; -update rewrites it there.
func TestFieldsInDocs(t *testing.T) {
	data, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	before, rest, ok1 := strings.Cut(doc, docsTableStart)
	table, after, ok2 := strings.Cut(rest, docsTableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no table of script fields between %q and %q", docsFile, docsTableStart, docsTableEnd)
	}
	want := FieldMarkdown()
	if table == want {
		return
	}
	if *update {
		if err := os.WriteFile(docsFile, []byte(before+docsTableStart+want+docsTableEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's table of script fields is not FieldMarkdown's; run go test ./gateway/mockllm -run TestFieldsInDocs -update:\n%s", docsFile, cmp.Diff(want, table))
}

// TestDocsScripts: every YAML script in docs/mock-llm.md (a yaml block
// with turns:) is valid, and has no warnings.
func TestDocsScripts(t *testing.T) {
	data, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, block := range strings.Split(string(data), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.HasPrefix(block, "turns:") && !strings.Contains(block, "\nturns:") {
			continue
		}
		n++
		s, err := ParseScript(fmt.Sprintf("yaml block %d", i+1), []byte(block))
		if err != nil {
			t.Errorf("%s's yaml block %d: %v", docsFile, i+1, err)
			continue
		}
		for _, w := range Warnings(s.Turns) {
			t.Errorf("%s's yaml block %d: %s", docsFile, i+1, w)
		}
	}
	if n < 4 {
		t.Errorf("found %d scripts in %s, want the example and one for each API", n, docsFile)
	}
}
