// Package strictyaml decodes YAML and JSON documents strictly, node by
// node, for the documents people write for sbx: policy files (netpolicy)
// and mock LLM scripts (gateway/mockllm). Every problem is reported with
// its line, up to MaxErrors of them; unknown fields are errors with a
// suggestion; duplicate keys, aliases and trailing documents are refused;
// and YAML's loose typing is refused too (yes or 1e3 where a string is
// wanted, "true" in quotes where a boolean is). A document that starts
// with '{' (or is named *.json) is read by encoding/json into the same
// node tree, with lines, since the YAML parser rejects valid JSON such as
// "\/" escapes and tab indentation.
//
// A package decodes its own fields with a Decoder and reports its own
// problems with Errorf; the Decoder only walks and checks the tree.
package strictyaml

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxErrors is how many problems a document is reported with at most; one
// more says there are more.
const MaxErrors = 50

// Error is one problem with a document. File is the name given to the
// decoder; Line is 1-based, 0 when unknown.
type Error struct {
	File string
	Line int
	Msg  string
	// Err is the problem's sentinel error, the decoding package's.
	Err error
}

// Error returns "FILE:LINE: message", leaving out what is unknown.
func (e *Error) Error() string {
	switch {
	case e.File != "" && e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	case e.File != "":
		return e.File + ": " + e.Msg
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// Unwrap returns the sentinel error.
func (e *Error) Unwrap() error { return e.Err }

// ErrorList is every problem found in a document, in the order they were
// found.
type ErrorList []*Error

// Error returns one problem per line.
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the problems, so errors.Is finds their sentinels.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// Kind describes the documents a Decoder reads, for its limits and its
// messages.
type Kind struct {
	// Noun names a document: "policy", "script".
	Noun string
	// Start is how a document starts, for the message about an empty
	// one: "version: 1", "turns:".
	Start string
	// MaxSize bounds a document, in bytes; MaxJSONDepth the nesting of a
	// JSON one.
	MaxSize, MaxJSONDepth int
	// JSONLists reads a document that starts with '[' as JSON when it is
	// valid JSON (a list of turns); otherwise such a document is YAML.
	JSONLists bool
	// Invalid is the sentinel of the Decoder's own problems: the
	// document's syntax, its shape and its scalars' types.
	Invalid error
}

// Decoder walks one document's node tree and collects every problem with
// its line. The zero value is not usable: set File and Kind.
type Decoder struct {
	// File names the document in problems.
	File string
	Kind Kind
	// Errs are the problems found so far.
	Errs ErrorList
}

// Errorf records a problem with sentinel; past MaxErrors it records one
// last "too many" and drops the rest.
func (d *Decoder) Errorf(line int, sentinel error, format string, args ...any) {
	switch {
	case len(d.Errs) < MaxErrors:
		d.Errs = append(d.Errs, &Error{File: d.File, Line: line, Msg: fmt.Sprintf(format, args...), Err: sentinel})
	case len(d.Errs) == MaxErrors:
		d.Errs = append(d.Errs, &Error{File: d.File, Line: line, Msg: fmt.Sprintf("more than %d problems; fix these and check again", MaxErrors), Err: d.Kind.Invalid})
	}
}

// invalidf records a problem of the Decoder's own.
func (d *Decoder) invalidf(line int, format string, args ...any) {
	d.Errorf(line, d.Kind.Invalid, format, args...)
}

// Parse returns the document's top node, or nil after recording why not.
func (d *Decoder) Parse(data []byte) *yaml.Node {
	if len(data) > d.Kind.MaxSize {
		d.invalidf(0, "larger than %d MiB", d.Kind.MaxSize>>20)
		return nil
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		d.invalidf(0, "empty document; a %s starts with %s", d.Kind.Noun, d.Kind.Start)
		return nil
	}
	if strings.HasSuffix(d.File, ".json") || trimmed[0] == '{' || d.Kind.JSONLists && trimmed[0] == '[' && json.Valid(trimmed) {
		n, err := jsonToNode(data, d.Kind.MaxJSONDepth)
		if err != nil {
			d.invalidf(err.line, "%s", err.msg)
			return nil
		}
		return n
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		d.yamlError(data, err)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		d.invalidf(extra.Line, "more than one YAML document; keep one %s per file", d.Kind.Noun)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		d.invalidf(doc.Line, "empty document; a %s starts with %s", d.Kind.Noun, d.Kind.Start)
		return nil
	}
	return doc.Content[0]
}

// yamlError turns the YAML library's "yaml: line N: msg" into an Error.
func (d *Decoder) yamlError(data []byte, err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				line, msg = n, after
			}
		}
	}
	if lines := bytes.Split(data, []byte("\n")); line > 0 && line <= len(lines) && bytes.ContainsRune(lines[line-1], '\t') {
		msg += "; YAML does not allow tabs for indentation, use spaces"
	}
	d.invalidf(line, "not valid YAML: %s", msg)
}

// Fields calls fn with each field of a mapping, in order, reporting
// duplicate keys, keys that are not plain names, keys not in known (with
// a suggestion) and aliases instead. It reports whether n was a mapping.
func (d *Decoder) Fields(n *yaml.Node, what string, known []string, fn func(key string, keyNode, val *yaml.Node)) bool {
	if n.Kind == yaml.AliasNode {
		d.invalidf(n.Line, "YAML aliases are not supported; write the value out")
		return false
	}
	if n.Kind != yaml.MappingNode {
		d.invalidf(n.Line, "%s must be a mapping of %s", what, strings.Join(known, ", "))
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.invalidf(k.Line, "%s: keys must be plain names", what)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.invalidf(k.Line, "%s: field %q given twice (first on line %d); keep one", what, k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		if !containsStr(known, k.Value) {
			hint := ""
			if s := suggest(k.Value, known); s != "" {
				hint = fmt.Sprintf("; did you mean %q?", s)
			}
			d.invalidf(k.Line, "%s: unknown field %q%s (known fields: %s)", what, k.Value, hint, strings.Join(known, ", "))
			continue
		}
		if v.Kind == yaml.AliasNode {
			d.invalidf(v.Line, "%s: YAML aliases are not supported; write the value out", what)
			continue
		}
		fn(k.Value, k, v)
	}
	return true
}

// Headers reads a mapping of header names to string values; a name given
// twice, in any case, is a problem with sentinel, as is a value that is
// not a mapping.
func (d *Decoder) Headers(n *yaml.Node, what string, sentinel error) map[string]string {
	if n.Kind != yaml.MappingNode {
		d.Errorf(n.Line, sentinel, "%s: want a mapping of header names to values", what)
		return nil
	}
	h := map[string]string{}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name, ok := d.Str(k, what)
		if !ok {
			continue
		}
		if first, dup := seen[strings.ToLower(name)]; dup {
			d.Errorf(k.Line, sentinel, "%s: header %q given twice (first on line %d); keep one", what, name, first)
			continue
		}
		seen[strings.ToLower(name)] = k.Line
		if val, ok := d.Str(v, what+": "+name); ok {
			h[name] = val
		}
	}
	return h
}

// Str reads a string scalar. A scalar that YAML reads as another type
// (true, 1e3, a !!binary value) is refused rather than taken as its text.
func (d *Decoder) Str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		got := n.Tag
		if n.Kind != yaml.ScalarNode {
			got = "a list or mapping"
		}
		d.invalidf(n.Line, "%s: want a string, got %s; put the value in quotes", what, got)
		return "", false
	}
	return n.Value, true
}

// Bool reads a boolean scalar: true or false, not a string such as "yes"
// or "true" in quotes.
func (d *Decoder) Bool(n *yaml.Node, what string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		if v, err := strconv.ParseBool(n.Value); err == nil {
			return v, true
		}
	}
	got := fmt.Sprintf("%q", n.Value)
	if n.Kind != yaml.ScalarNode {
		got = "a list or mapping"
	}
	d.invalidf(n.Line, "%s: want true or false without quotes, got %s", what, got)
	return false, false
}

// Int reads an integer scalar.
func (d *Decoder) Int(n *yaml.Node, what string) (int, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, err := strconv.Atoi(n.Value); err == nil {
			return v, true
		}
	}
	d.invalidf(n.Line, "%s: want a whole number, got %q", what, n.Value)
	return 0, false
}

// Strs reads a list of strings, each item called item in problems; the
// items that are not strings are left out. It is never nil: a list given
// empty is told from one not given.
func (d *Decoder) Strs(n *yaml.Node, what, item string) []string {
	list := []string{}
	for _, it := range d.Seq(n, what) {
		if s, ok := d.Str(it, item); ok {
			list = append(list, s)
		}
	}
	return list
}

// Seq returns a sequence's items; null is an empty list.
func (d *Decoder) Seq(n *yaml.Node, what string) []*yaml.Node {
	if n.Kind == yaml.SequenceNode {
		return n.Content
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	d.invalidf(n.Line, "%s: want a list", what)
	return nil
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns the entry of known closest to s, if it is a likely typo.
func suggest(s string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if dist := EditDistance(strings.ToLower(s), k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	return best
}

// EditDistance is the Levenshtein distance of two short strings, in
// bytes: what the decoder's "did you mean" for unknown fields goes by, and
// the CLI's for unknown flags.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// jsonError is a JSON syntax problem with its line.
type jsonError struct {
	line int
	msg  string
}

// jsonToNode parses a JSON document into the node tree the YAML decoder
// makes, with lines, so both formats share one checker. The YAML parser
// itself is not used for JSON: it rejects valid JSON such as "\/" escapes
// and tab indentation.
func jsonToNode(data []byte, maxDepth int) (*yaml.Node, *jsonError) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	// lineAt counts lines from where it last counted: offsets only grow,
	// so a document is counted once, not once per token.
	var lastOff int64
	lastLine := 1
	lineAt := func(off int64) int {
		off = min(off, int64(len(data)))
		if off < lastOff {
			lastOff, lastLine = 0, 1
		}
		lastLine += bytes.Count(data[lastOff:off], []byte("\n"))
		lastOff = off
		return lastLine
	}
	// next returns the line where the next token starts.
	next := func() int {
		off := dec.InputOffset()
		for off < int64(len(data)) && strings.IndexByte(" \t\r\n,:", data[off]) >= 0 {
			off++
		}
		return lineAt(off)
	}
	fail := func(err error) *jsonError {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			msg := "not valid JSON: " + se.Error() +
				"; a document that starts with '{' is read as JSON, where keys and strings need double quotes and lists take no trailing comma"
			return &jsonError{lineAt(se.Offset), msg}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &jsonError{lineAt(int64(len(data))), "not valid JSON: unexpected end of document"}
		}
		return &jsonError{next(), "not valid JSON: " + err.Error()}
	}
	var value func(depth int) (*yaml.Node, *jsonError)
	value = func(depth int) (*yaml.Node, *jsonError) {
		line := next()
		if depth > maxDepth {
			return nil, &jsonError{line, "not valid here: JSON nested too deeply"}
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, fail(err)
		}
		switch v := tok.(type) {
		case json.Delim:
			n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Line: line}
			if v == '{' {
				n.Kind, n.Tag = yaml.MappingNode, "!!map"
			}
			for dec.More() {
				if n.Kind == yaml.MappingNode {
					kline := next()
					ktok, err := dec.Token()
					if err != nil {
						return nil, fail(err)
					}
					key, _ := ktok.(string)
					n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key, Line: kline})
				}
				child, jerr := value(depth + 1)
				if jerr != nil {
					return nil, jerr
				}
				n.Content = append(n.Content, child)
			}
			if _, err := dec.Token(); err != nil { // the closing delimiter
				return nil, fail(err)
			}
			return n, nil
		case string:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v, Line: line}, nil
		case json.Number:
			tag := "!!float"
			if _, err := v.Int64(); err == nil {
				tag = "!!int"
			}
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v.String(), Line: line}, nil
		case bool:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v), Line: line}, nil
		default: // nil
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null", Line: line}, nil
		}
	}
	root, jerr := value(0)
	if jerr != nil {
		return nil, jerr
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &jsonError{next(), "not valid JSON: data after the end of the document"}
	}
	return root, nil
}
