package netpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxPolicySize is the largest policy document Parse and ParseFile read:
// ample for tens of thousands of rules, and a bound on the memory the YAML
// parser takes (some 90 times the document).
const MaxPolicySize = 4 << 20

// maxErrors is how many problems a document is reported with at most.
const maxErrors = 50

// maxJSONDepth bounds the nesting of a JSON document; a policy needs four
// levels.
const maxJSONDepth = 32

// ParseError is one problem with a policy document. File is the name given
// to Parse (empty for Compile); Line is 1-based, 0 when unknown.
type ParseError struct {
	File string
	Line int
	Msg  string
	// Err is ErrInvalidPolicy or ErrInvalidRule.
	Err error
}

// Error returns "FILE:LINE: message", leaving out what is unknown.
func (e *ParseError) Error() string {
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

// Unwrap returns ErrInvalidPolicy or ErrInvalidRule.
func (e *ParseError) Unwrap() error { return e.Err }

// ErrorList is every problem found in a policy, in the order of the
// document. Compile, Decode, Parse and ParseFile return one.
type ErrorList []*ParseError

// Error returns one problem per line.
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the problems, so errors.Is(err, ErrInvalidRule) works.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// ParseFile reads, checks and compiles a policy file, YAML or JSON.
// Problems come back as an ErrorList of "FILE:LINE: message" entries.
func ParseFile(path string) (*Policy, error) {
	spec, err := DecodeFile(path)
	if err != nil {
		return nil, err
	}
	return compileNamed(path, spec)
}

// Parse is ParseFile for a document in memory; name is used in messages.
func Parse(name string, data []byte) (*Policy, error) {
	spec, err := Decode(name, data)
	if err != nil {
		return nil, err
	}
	return compileNamed(name, spec)
}

// compileNamed compiles a spec that Decode has checked; an error here would
// be a bug in Decode, but name it all the same.
func compileNamed(name string, spec Spec) (*Policy, error) {
	p, err := Compile(spec)
	var list ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			e.File = name
		}
	}
	return p, err
}

// DecodeFile reads and checks a policy file without compiling it, so that
// rules from flags can be added before ids are assigned. A file that cannot
// be read gives the *fs.PathError of os.Open (errors.Is(err,
// fs.ErrNotExist) for a missing one); a bad document gives an ErrorList.
func DecodeFile(path string) (Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return Spec{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxPolicySize+1))
	if err != nil {
		return Spec{}, fmt.Errorf("reading policy %s: %w", path, err)
	}
	return Decode(path, data)
}

// Decode parses and checks a policy document, YAML or JSON (a document
// whose name ends in .json or whose first character is '{'), rejecting
// unknown fields. Every problem is reported with its line, as an ErrorList.
// Rule ids are not assigned; Compile does that.
func Decode(name string, data []byte) (Spec, error) {
	d := decoder{file: name}
	root := d.parse(data)
	if root == nil {
		return Spec{}, d.errs
	}
	spec := d.spec(root)
	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
		return Spec{}, d.errs
	}
	return spec, nil
}

// DecodeRule parses and checks a single rule, as the management API
// receives it (JSON or YAML). The rule's id is not assigned.
func DecodeRule(name string, data []byte) (Rule, error) {
	d := decoder{file: name}
	root := d.parse(data)
	if root == nil {
		return Rule{}, d.errs
	}
	r, _ := d.rule(root, "rule", map[string]int{})
	if len(d.errs) > 0 {
		return Rule{}, d.errs
	}
	return r, nil
}

// DecodeAddRule is DecodeRule for the body of the management API's
// POST /v1/policy/rules: a rule that may also carry "position", a whole
// number from 0 (first). position is -1 when the body has none, which
// Store.AddRule reads as "append".
func DecodeAddRule(name string, data []byte) (r Rule, position int, err error) {
	d := decoder{file: name}
	root := d.parse(data)
	if root == nil {
		return Rule{}, 0, d.errs
	}
	position = -1
	if root.Kind == yaml.MappingNode {
		kept := make([]*yaml.Node, 0, len(root.Content))
		for i := 0; i+1 < len(root.Content); i += 2 {
			k, v := root.Content[i], root.Content[i+1]
			if k.Value != "position" {
				kept = append(kept, k, v)
				continue
			}
			if n, ok := d.int(v, "rule: position"); ok {
				if n < 0 {
					d.errorf(v.Line, ErrInvalidRule, "rule: position %d: want 0 (first) or more; leave it out to append", n)
				}
				position = n
			}
		}
		root.Content = kept
	}
	r, _ = d.rule(root, "rule", map[string]int{})
	if len(d.errs) > 0 {
		return Rule{}, 0, d.errs
	}
	return r, position, nil
}

// decoder walks a YAML node tree (JSON documents are turned into one) and
// collects every problem with its line.
type decoder struct {
	file string
	errs ErrorList
}

// errorf records a problem; past maxErrors it records one last "too many"
// and drops the rest.
func (d *decoder) errorf(line int, sentinel error, format string, args ...any) {
	switch {
	case len(d.errs) < maxErrors:
		d.errs = append(d.errs, &ParseError{File: d.file, Line: line, Msg: fmt.Sprintf(format, args...), Err: sentinel})
	case len(d.errs) == maxErrors:
		d.errs = append(d.errs, &ParseError{File: d.file, Line: line, Msg: fmt.Sprintf("more than %d problems; fix these and check again", maxErrors), Err: ErrInvalidPolicy})
	}
}

// parse returns the document's top node, or nil after recording why not.
func (d *decoder) parse(data []byte) *yaml.Node {
	if len(data) > MaxPolicySize {
		d.errorf(0, ErrInvalidPolicy, "larger than %d MiB", MaxPolicySize>>20)
		return nil
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		d.errorf(0, ErrInvalidPolicy, "empty document; a policy starts with version: 1")
		return nil
	}
	if strings.HasSuffix(d.file, ".json") || trimmed[0] == '{' {
		n, err := jsonToNode(data)
		if err != nil {
			d.errorf(err.line, ErrInvalidPolicy, "%s", err.msg)
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
		d.errorf(extra.Line, ErrInvalidPolicy, "more than one YAML document; keep one policy per file")
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		d.errorf(doc.Line, ErrInvalidPolicy, "empty document; a policy starts with version: 1")
		return nil
	}
	return doc.Content[0]
}

// yamlError turns the YAML library's "yaml: line N: msg" into a ParseError.
func (d *decoder) yamlError(data []byte, err error) {
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
	d.errorf(line, ErrInvalidPolicy, "not valid YAML: %s", msg)
}

// fields iterates over a mapping, reporting duplicate keys, non-string keys
// and keys not in known (with a suggestion).
func (d *decoder) fields(n *yaml.Node, what string, known []string, fn func(key string, keyNode, val *yaml.Node)) bool {
	if n.Kind == yaml.AliasNode {
		d.errorf(n.Line, ErrInvalidPolicy, "YAML aliases are not supported; write the value out")
		return false
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, ErrInvalidPolicy, "%s must be a mapping of %s", what, strings.Join(known, ", "))
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, ErrInvalidPolicy, "%s: keys must be plain names", what)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, ErrInvalidPolicy, "%s: field %q given twice (first on line %d); keep one", what, k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		if !containsStr(known, k.Value) {
			hint := ""
			if s := suggest(k.Value, known); s != "" {
				hint = fmt.Sprintf("; did you mean %q?", s)
			}
			d.errorf(k.Line, ErrInvalidPolicy, "%s: unknown field %q%s (known fields: %s)", what, k.Value, hint, strings.Join(known, ", "))
			continue
		}
		if v.Kind == yaml.AliasNode {
			d.errorf(v.Line, ErrInvalidPolicy, "%s: YAML aliases are not supported; write the value out", what)
			continue
		}
		fn(k.Value, k, v)
	}
	return true
}

var (
	specFields     = []string{"version", "default", "mode", "allow_private", "rules"}
	ruleFields     = []string{"id", "host", "ports", "methods", "path", "action", "inspect", "response"}
	responseFields = []string{"status", "headers", "body", "llm"}
)

func (d *decoder) spec(n *yaml.Node) Spec {
	var spec Spec
	lines := map[string]int{}
	d.fields(n, "policy", specFields, func(key string, k, v *yaml.Node) {
		lines[key] = k.Line
		switch key {
		case "version":
			if n, ok := d.int(v, "version"); ok {
				if n != FormatVersion {
					d.errorf(v.Line, ErrInvalidPolicy, "version: version %d is not supported; write version: %d", n, FormatVersion)
				}
				spec.Version = n
			}
		case "default":
			s, _ := d.str(v, "default")
			spec.Default = Action(s)
		case "mode":
			s, _ := d.str(v, "mode")
			spec.Mode = Mode(s)
		case "allow_private":
			for _, item := range d.seq(v, "allow_private") {
				s, ok := d.str(item, "allow_private entry")
				if !ok {
					continue
				}
				pfx, err := netip.ParsePrefix(s)
				if err != nil {
					if ip, ierr := netip.ParseAddr(s); ierr == nil {
						d.errorf(item.Line, ErrInvalidPolicy, "allow_private: %q is an address; write a CIDR such as %s", s, netip.PrefixFrom(ip, ip.BitLen()))
					} else {
						d.errorf(item.Line, ErrInvalidPolicy, "allow_private: %q is not a CIDR (want e.g. 10.0.0.0/8)", s)
					}
					continue
				}
				if _, err := normalizePrefix(pfx); err != nil {
					d.errorf(item.Line, ErrInvalidPolicy, "allow_private: %s", err)
					continue
				}
				spec.AllowPrivate = append(spec.AllowPrivate, pfx)
			}
		case "rules":
			ids := map[string]int{}
			for i, item := range d.seq(v, "rules") {
				if r, ok := d.rule(item, fmt.Sprintf("rule %d", i+1), ids); ok {
					spec.Rules = append(spec.Rules, r)
				}
			}
		}
	})
	// Check the top-level values the way Compile will, with lines.
	check := spec
	check.AllowPrivate = nil
	check.Version = 0 // checked above, with its line
	for _, fe := range checkSpecFields(&check) {
		d.errorf(lines[fe.field], ErrInvalidPolicy, "%s: %s", fe.field, fe.msg)
	}
	return spec
}

// rule decodes and checks a rule that messages call what; ids maps the ids
// seen so far to their lines.
func (d *decoder) rule(n *yaml.Node, what string, ids map[string]int) (Rule, bool) {
	var r Rule
	lines := map[string]int{}
	before := len(d.errs)
	ok := d.fields(n, what, ruleFields, func(key string, k, v *yaml.Node) {
		lines[key] = k.Line
		switch key {
		case "id":
			r.ID, _ = d.str(v, what+": id")
		case "host":
			r.Host, _ = d.str(v, what+": host")
		case "action":
			s, _ := d.str(v, what+": action")
			r.Action = Action(s)
		case "path":
			r.Path, _ = d.str(v, what+": path")
		case "inspect":
			r.Inspect, _ = d.bool(v, what+": inspect")
		case "methods":
			r.Methods = []string{}
			for _, item := range d.seq(v, what+": methods") {
				if s, ok := d.str(item, what+": method"); ok {
					r.Methods = append(r.Methods, s)
				}
			}
		case "ports":
			r.Ports = []Port{}
			for _, item := range d.seq(v, what+": ports") {
				if item.Kind != yaml.ScalarNode {
					d.errorf(item.Line, ErrInvalidRule, "%s: ports: want a number from 1 to 65535 or \"*\"", what)
					continue
				}
				p, err := ParsePort(item.Value)
				if err != nil || (item.Tag != "!!int" && item.Value != "*") {
					d.errorf(item.Line, ErrInvalidRule, "%s: ports: %q is not a port; want a number from 1 to 65535 or \"*\"", what, item.Value)
					continue
				}
				r.Ports = append(r.Ports, p)
			}
		case "response":
			r.Response = d.response(v, what)
		}
	})
	if !ok || len(d.errs) > before {
		return r, false
	}
	if r.ID != "" {
		if first, dup := ids[r.ID]; dup {
			d.errorf(lines["id"], ErrInvalidRule, "%s: id %q is already used on line %d; ids must be unique", what, r.ID, first)
		} else {
			ids[r.ID] = lines["id"]
		}
	}
	check := r.clone()
	_, ferrs := checkRule(&check)
	for _, fe := range ferrs {
		line := n.Line
		if l, ok := lines[fe.field]; ok {
			line = l
		}
		if fe.field == "" {
			d.errorf(line, ErrInvalidRule, "%s: %s", what, fe.msg)
		} else {
			d.errorf(line, ErrInvalidRule, "%s: %s: %s", what, fe.field, fe.msg)
		}
	}
	return r, true
}

func (d *decoder) response(n *yaml.Node, what string) *Response {
	resp := &Response{}
	d.fields(n, what+": response", responseFields, func(key string, k, v *yaml.Node) {
		switch key {
		case "status":
			resp.Status, _ = d.int(v, what+": response: status")
		case "body":
			resp.Body, _ = d.str(v, what+": response: body")
		case "headers":
			resp.Headers = d.headers(v, what+": response: headers")
		case "llm":
			resp.LLM, _ = d.str(v, what+": response: llm")
		}
	})
	return resp
}

// headers reads a mapping of header names to string values.
func (d *decoder) headers(n *yaml.Node, what string) map[string]string {
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, ErrInvalidRule, "%s: want a mapping of header names to values", what)
		return nil
	}
	h := map[string]string{}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name, ok := d.str(k, what)
		if !ok {
			continue
		}
		if first, dup := seen[strings.ToLower(name)]; dup {
			d.errorf(k.Line, ErrInvalidRule, "%s: header %q given twice (first on line %d); keep one", what, name, first)
			continue
		}
		seen[strings.ToLower(name)] = k.Line
		if val, ok := d.str(v, what+": "+name); ok {
			h[name] = val
		}
	}
	return h
}

// str reads a string scalar. A scalar that YAML reads as another type
// (true, 1e3, a !!binary value) is refused rather than taken as its text.
func (d *decoder) str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		got := n.Tag
		if n.Kind != yaml.ScalarNode {
			got = "a list or mapping"
		}
		d.errorf(n.Line, ErrInvalidPolicy, "%s: want a string, got %s; put the value in quotes", what, got)
		return "", false
	}
	return n.Value, true
}

// bool reads a boolean scalar: true or false, not a string such as "yes"
// or "true" in quotes.
func (d *decoder) bool(n *yaml.Node, what string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		if v, err := strconv.ParseBool(n.Value); err == nil {
			return v, true
		}
	}
	got := fmt.Sprintf("%q", n.Value)
	if n.Kind != yaml.ScalarNode {
		got = "a list or mapping"
	}
	d.errorf(n.Line, ErrInvalidRule, "%s: want true or false without quotes, got %s", what, got)
	return false, false
}

// int reads an integer scalar.
func (d *decoder) int(n *yaml.Node, what string) (int, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, err := strconv.Atoi(n.Value); err == nil {
			return v, true
		}
	}
	d.errorf(n.Line, ErrInvalidPolicy, "%s: want a whole number, got %q", what, n.Value)
	return 0, false
}

// seq returns a sequence's items.
func (d *decoder) seq(n *yaml.Node, what string) []*yaml.Node {
	if n.Kind == yaml.SequenceNode {
		return n.Content
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	d.errorf(n.Line, ErrInvalidPolicy, "%s: want a list", what)
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
		if dist := editDistance(strings.ToLower(s), k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	return best
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
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
func jsonToNode(data []byte) (*yaml.Node, *jsonError) {
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
		if depth > maxJSONDepth {
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
