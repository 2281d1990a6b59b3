package strictyaml

import (
	"errors"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var errTest = errors.New("invalid test document")

// decode reads doc as a document with the fields name (a string), on (a
// boolean), n (a number), list (a list) and headers, and returns its
// problems joined.
func decode(kind Kind, file, doc string) (map[string]any, string) {
	d := Decoder{File: file, Kind: kind}
	got := map[string]any{}
	if root := d.Parse([]byte(doc)); root != nil {
		d.Fields(root, "doc", []string{"name", "on", "n", "list", "headers"}, func(key string, _, v *yaml.Node) {
			switch key {
			case "name":
				got[key], _ = d.Str(v, key)
			case "on":
				got[key], _ = d.Bool(v, key)
			case "n":
				got[key], _ = d.Int(v, key)
			case "list":
				got[key] = len(d.Strs(v, key, "item"))
			case "headers":
				got[key] = d.Headers(v, key, errTest)
			}
		})
	}
	for _, e := range d.Errs {
		if !errors.Is(e, errTest) {
			panic("a problem without the sentinel: " + e.Error())
		}
	}
	return got, d.Errs.Error()
}

var testKind = Kind{Noun: "thing", Start: "name:", MaxSize: 1 << 20, MaxJSONDepth: 4, Invalid: errTest}

func TestDecoder(t *testing.T) {
	for _, tt := range []struct {
		name, file, doc, want string
	}{
		{"valid YAML", "t.yaml", "name: a\non: true\nn: 3\nlist: [a, b]\nheaders: {A: b}\n", ""},
		{"not a string in a list", "t.yaml", "list: [a, 2]\n", "t.yaml:1: item: want a string, got !!int"},
		{"valid JSON", "t.json", `{"name": "a\/b", "on": false}`, ""},
		{"empty", "t.yaml", " \n", "t.yaml: empty document; a thing starts with name:"},
		{"two documents", "t.yaml", "name: a\n---\nname: b\n", "t.yaml:2: more than one YAML document; keep one thing per file"},
		{"tab", "t.yaml", "name: a\n\tn: 1\n", "YAML does not allow tabs"},
		{"unknown field", "t.yaml", "nmae: a\n", `t.yaml:1: doc: unknown field "nmae"; did you mean "name"?`},
		{"duplicate", "t.yaml", "name: a\nname: b\n", `t.yaml:2: doc: field "name" given twice (first on line 1); keep one`},
		{"alias", "t.yaml", "name: &x a\nn: *x\n", "t.yaml:2: doc: YAML aliases are not supported"},
		{"loose string", "t.yaml", "name: true\n", "t.yaml:1: name: want a string, got !!bool; put the value in quotes"},
		{"quoted bool", "t.yaml", "on: \"true\"\n", `t.yaml:1: on: want true or false without quotes, got "true"`},
		{"float for int", "t.yaml", "n: 1.5\n", `t.yaml:1: n: want a whole number, got "1.5"`},
		{"scalar for list", "t.yaml", "list: 3\n", "t.yaml:1: list: want a list"},
		{"header twice", "t.yaml", "headers: {A: b, a: c}\n", `t.yaml:1: headers: header "a" given twice`},
		{"bad JSON", "t.json", "{\n\"name\": 'a'}", "t.json:2: not valid JSON"},
		{"deep JSON", "t.json", `{"list": [[[[[1]]]]]}`, "JSON nested too deeply"},
		{"not a mapping", "t.yaml", "- a\n", "t.yaml:1: doc must be a mapping of name, on, n, list, headers"},
	} {
		_, errs := decode(testKind, tt.file, tt.doc)
		if tt.want == "" && errs != "" || !strings.Contains(errs, tt.want) {
			t.Errorf("%s: problems %q, want %q", tt.name, errs, tt.want)
		}
	}
}

// TestDecoderLimits: a document over MaxSize is refused before it is
// parsed, and problems stop at MaxErrors and one more saying so.
func TestDecoderLimits(t *testing.T) {
	small := testKind
	small.MaxSize = 10
	if _, errs := decode(small, "t.yaml", "name: abcdefghijk\n"); !strings.Contains(errs, "larger than 0 MiB") {
		t.Errorf("over MaxSize: got %q", errs)
	}
	var doc strings.Builder
	for range MaxErrors + 10 {
		doc.WriteString("bad: 1\n")
	}
	d := Decoder{File: "t.yaml", Kind: testKind}
	d.Fields(d.Parse([]byte(doc.String())), "doc", []string{"name"}, func(string, *yaml.Node, *yaml.Node) {})
	if len(d.Errs) != MaxErrors+1 || !strings.Contains(d.Errs[MaxErrors].Msg, "more than 50 problems") {
		t.Errorf("got %d problems, want %d and a last one saying there are more", len(d.Errs), MaxErrors+1)
	}
}

// TestJSONLists: with JSONLists, a document that starts with '[' and is
// valid JSON is read as JSON (YAML would refuse its "\/"); otherwise it is
// YAML.
func TestJSONLists(t *testing.T) {
	doc := `["a\/b"]`
	for _, lists := range []bool{false, true} {
		k := testKind
		k.JSONLists = lists
		d := Decoder{File: "t", Kind: k}
		n := d.Parse([]byte(doc))
		switch {
		case lists && (n == nil || len(n.Content) != 1 || n.Content[0].Value != "a/b"):
			t.Errorf("JSONLists: got %v %v, want the JSON string a/b", n, d.Errs)
		case !lists && len(d.Errs) == 0:
			t.Errorf("without JSONLists: got no problem, want YAML's refusal of the escape")
		}
	}
}
