package mockllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The decoder follows netpolicy/parse.go: a document (YAML, or JSON turned
// into the same node tree) is walked node by node so that every problem is
// reported with its line, unknown fields are errors with a suggestion, and
// YAML's loose typing ("yes", 1e3 for a string) is refused.

// MaxScriptSize is the largest script ParseScript, ParseScriptFile and
// DecodeTurns read: room for long recorded streams, and a bound on the
// memory the YAML parser takes.
const MaxScriptSize = 32 << 20

// maxErrors is how many problems a document is reported with at most.
const maxErrors = 50

// maxJSONDepth bounds the nesting of a JSON document and of a tool call's
// input.
const maxJSONDepth = 64

// ErrInvalidScript is what every ParseError unwraps to.
var ErrInvalidScript = errors.New("invalid mock LLM script")

// ParseError is one problem with a script. File is the name given to the
// decoder; Line is 1-based, 0 when unknown.
type ParseError struct {
	File string
	Line int
	Msg  string
	// Err is ErrInvalidScript.
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

// Unwrap returns ErrInvalidScript.
func (e *ParseError) Unwrap() error { return e.Err }

// ErrorList is every problem found in a script, in the order of the
// document.
type ErrorList []*ParseError

// Error returns one problem per line.
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap returns the problems, so errors.Is(err, ErrInvalidScript) works.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// ParseScriptFile reads and checks a script file, YAML or JSON. A file that
// cannot be read gives the *fs.PathError of os.Open; a bad script gives an
// ErrorList of "FILE:LINE: message" entries.
func ParseScriptFile(path string) (*Script, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxScriptSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading mock LLM script %s: %w", path, err)
	}
	return ParseScript(path, data)
}

// ParseScript parses and checks a script: a mapping whose turns field is
// the list of turns. JSON is read as such when name ends in .json or the
// document starts with '{'. name is used in messages and in each turn's
// Origin.
func ParseScript(name string, data []byte) (*Script, error) {
	d := decoder{file: name}
	root := d.parse(data)
	if root == nil {
		return nil, d.errs
	}
	var s Script
	d.fields(root, "script", scriptFields, func(key string, k, v *yaml.Node) {
		s.Turns = d.turns(v)
	})
	if err := d.err(); err != nil {
		return nil, err
	}
	return &s, nil
}

// DecodeTurns parses and checks turns to queue at runtime, as the
// management API receives them (JSON or YAML): a script ({"turns": [...]}),
// a list of turns, or a single turn. name is used in messages and Origin.
func DecodeTurns(name string, data []byte) ([]Turn, error) {
	d := decoder{file: name}
	root := d.parse(data)
	if root == nil {
		return nil, d.errs
	}
	var turns []Turn
	switch {
	case root.Kind == yaml.SequenceNode:
		turns = d.turns(root)
	case root.Kind == yaml.MappingNode && hasKey(root, "turns"):
		d.fields(root, "script", scriptFields, func(key string, k, v *yaml.Node) {
			turns = d.turns(v)
		})
	default:
		if t, ok := d.turn(root, "turn"); ok {
			turns = []Turn{t}
		}
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return turns, nil
}

func hasKey(n *yaml.Node, key string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// decoder walks a YAML node tree and collects every problem with its line.
type decoder struct {
	file string
	errs ErrorList
}

// err returns the problems sorted by line, or nil.
func (d *decoder) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	sort.SliceStable(d.errs, func(i, j int) bool { return d.errs[i].Line < d.errs[j].Line })
	return d.errs
}

// errorf records a problem; past maxErrors it records one last "too many"
// and drops the rest.
func (d *decoder) errorf(line int, format string, args ...any) {
	switch {
	case len(d.errs) < maxErrors:
		d.errs = append(d.errs, &ParseError{File: d.file, Line: line, Msg: fmt.Sprintf(format, args...), Err: ErrInvalidScript})
	case len(d.errs) == maxErrors:
		d.errs = append(d.errs, &ParseError{File: d.file, Line: line, Msg: fmt.Sprintf("more than %d problems; fix these and check again", maxErrors), Err: ErrInvalidScript})
	}
}

// parse returns the document's top node, or nil after recording why not.
func (d *decoder) parse(data []byte) *yaml.Node {
	if len(data) > MaxScriptSize {
		d.errorf(0, "larger than %d MiB; split the script", MaxScriptSize>>20)
		return nil
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		d.errorf(0, "empty document; a script starts with turns:")
		return nil
	}
	if strings.HasSuffix(d.file, ".json") || trimmed[0] == '{' || trimmed[0] == '[' && json.Valid(trimmed) {
		n, err := jsonToNode(data)
		if err != nil {
			d.errorf(err.line, "%s", err.msg)
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
		d.errorf(extra.Line, "more than one YAML document; keep one script per file")
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		d.errorf(doc.Line, "empty document; a script starts with turns:")
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
	d.errorf(line, "not valid YAML: %s", msg)
}

var (
	scriptFields   = []string{"turns"}
	turnFields     = []string{"match", "reply", "fault", "times"}
	matchFields    = []string{"model", "user", "user_regexp", "tool_result"}
	replyFields    = []string{"text", "tool_calls", "stop_reason", "usage", "chunk_size", "chunk_delay_ms", "raw"}
	toolCallFields = []string{"id", "name", "input"}
	usageFields    = []string{"input_tokens", "output_tokens"}
	rawFields      = []string{"dialect", "events", "body"}
	faultFields    = []string{"status", "headers", "body", "delay_ms", "disconnect_after_bytes", "disconnect_after_events", "stall"}
)

// fields iterates over a mapping, reporting duplicate keys, non-string keys
// and keys not in known (with a suggestion).
func (d *decoder) fields(n *yaml.Node, what string, known []string, fn func(key string, keyNode, val *yaml.Node)) bool {
	if n.Kind == yaml.AliasNode {
		d.errorf(n.Line, "YAML aliases are not supported; write the value out")
		return false
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, "%s must be a mapping of %s", what, strings.Join(known, ", "))
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k.Line, "%s: keys must be plain names", what)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, "%s: field %q given twice (first on line %d); keep one", what, k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		if !containsStr(known, k.Value) {
			hint := ""
			if s := suggest(k.Value, known); s != "" {
				hint = fmt.Sprintf("; did you mean %q?", s)
			}
			d.errorf(k.Line, "%s: unknown field %q%s (known fields: %s)", what, k.Value, hint, strings.Join(known, ", "))
			continue
		}
		if v.Kind == yaml.AliasNode {
			d.errorf(v.Line, "%s: YAML aliases are not supported; write the value out", what)
			continue
		}
		fn(k.Value, k, v)
	}
	return true
}

// turns decodes a list of turns.
func (d *decoder) turns(n *yaml.Node) []Turn {
	items := d.seq(n, "turns")
	turns := make([]Turn, 0, len(items))
	for i, item := range items {
		if t, ok := d.turn(item, fmt.Sprintf("turn %d", i+1)); ok {
			turns = append(turns, t)
		}
	}
	return turns
}

// turn decodes and checks a turn that messages call what.
func (d *decoder) turn(n *yaml.Node, what string) (Turn, bool) {
	t := Turn{Origin: d.origin(n.Line)}
	before := len(d.errs)
	// lines maps the path of each field ("reply.chunk_size") to its line.
	lines := map[string]int{}
	ok := d.fields(n, what, turnFields, func(key string, k, v *yaml.Node) {
		lines[key] = k.Line
		switch key {
		case "times":
			if n, ok := d.int(v, what+": times"); ok {
				if n < 1 {
					d.errorf(v.Line, "%s: times: %d: want 1 or more (leave it out for 1)", what, n)
				}
				t.Times = n
			}
		case "match":
			t.Match = d.match(v, what+": match", lines)
		case "reply":
			t.Reply = d.reply(v, what+": reply", lines)
		case "fault":
			t.Fault = d.fault(v, what+": fault", lines)
		}
	})
	if !ok || len(d.errs) > before {
		return t, false
	}
	for _, p := range checkTurn(&t) {
		line, ok := lines[p.field]
		if !ok {
			line = n.Line
		}
		if p.field == "" {
			d.errorf(line, "%s: %s", what, p.msg)
		} else {
			d.errorf(line, "%s: %s: %s", what, p.field, p.msg)
		}
	}
	return t, len(d.errs) == before
}

// origin names a line of the document, such as "script.yaml:12".
func (d *decoder) origin(line int) string {
	switch {
	case d.file == "":
		return fmt.Sprintf("line %d", line)
	case line == 0:
		return d.file
	}
	return fmt.Sprintf("%s:%d", d.file, line)
}

func (d *decoder) match(n *yaml.Node, what string, lines map[string]int) *Match {
	m := &Match{}
	d.fields(n, what, matchFields, func(key string, k, v *yaml.Node) {
		lines["match."+key] = k.Line
		s, ok := d.str(v, what+": "+key)
		if ok && s == "" {
			d.errorf(v.Line, "%s: %s is empty; leave it out to match any request", what, key)
		}
		switch key {
		case "model":
			m.Model = s
		case "user":
			m.User = s
		case "user_regexp":
			m.UserRegexp = s
		case "tool_result":
			m.ToolResult = s
		}
	})
	return m
}

func (d *decoder) reply(n *yaml.Node, what string, lines map[string]int) *Reply {
	r := &Reply{}
	d.fields(n, what, replyFields, func(key string, k, v *yaml.Node) {
		lines["reply."+key] = k.Line
		switch key {
		case "text":
			r.Text, _ = d.str(v, what+": text")
		case "stop_reason":
			r.StopReason, _ = d.str(v, what+": stop_reason")
		case "chunk_size":
			if n, ok := d.int(v, what+": chunk_size"); ok {
				if n < 1 {
					d.errorf(v.Line, "%s: chunk_size: %d: want 1 or more (leave it out for %d)", what, n, DefaultChunkSize)
				}
				r.ChunkSize = n
			}
		case "chunk_delay_ms":
			r.ChunkDelayMS, _ = d.int(v, what+": chunk_delay_ms")
		case "usage":
			u := &Usage{}
			d.fields(v, what+": usage", usageFields, func(key string, k, v *yaml.Node) {
				switch key {
				case "input_tokens":
					u.InputTokens, _ = d.int(v, what+": usage: input_tokens")
				case "output_tokens":
					u.OutputTokens, _ = d.int(v, what+": usage: output_tokens")
				}
			})
			r.Usage = u
		case "tool_calls":
			r.ToolCalls = []ToolCall{}
			for i, item := range d.seq(v, what+": tool_calls") {
				r.ToolCalls = append(r.ToolCalls, d.toolCall(item, fmt.Sprintf("%s: tool call %d", what, i+1)))
			}
		case "raw":
			r.Raw = d.raw(v, what+": raw", lines)
		}
	})
	return r
}

func (d *decoder) toolCall(n *yaml.Node, what string) ToolCall {
	var c ToolCall
	d.fields(n, what, toolCallFields, func(key string, k, v *yaml.Node) {
		switch key {
		case "id":
			c.ID, _ = d.str(v, what+": id")
		case "name":
			c.Name, _ = d.str(v, what+": name")
		case "input":
			if v.Kind != yaml.MappingNode {
				d.errorf(v.Line, "%s: input must be a mapping of argument names to values", what)
				return
			}
			var b bytes.Buffer
			if d.toJSON(&b, v, what+": input", 0) {
				c.Input = json.RawMessage(b.Bytes())
			}
		}
	})
	return c
}

func (d *decoder) raw(n *yaml.Node, what string, lines map[string]int) *Raw {
	r := &Raw{}
	d.fields(n, what, rawFields, func(key string, k, v *yaml.Node) {
		lines["reply.raw."+key] = k.Line
		switch key {
		case "dialect":
			s, _ := d.str(v, what+": dialect")
			r.Dialect = Dialect(s)
		case "body":
			r.Body, _ = d.str(v, what+": body")
		case "events":
			r.Events = []string{}
			for _, item := range d.seq(v, what+": events") {
				if s, ok := d.str(item, what+": event"); ok {
					r.Events = append(r.Events, s)
				}
			}
		}
	})
	return r
}

func (d *decoder) fault(n *yaml.Node, what string, lines map[string]int) *Fault {
	f := &Fault{}
	d.fields(n, what, faultFields, func(key string, k, v *yaml.Node) {
		lines["fault."+key] = k.Line
		switch key {
		case "status":
			f.Status, _ = d.int(v, what+": status")
		case "headers":
			f.Headers = d.headers(v, what+": headers")
		case "body":
			f.Body, _ = d.str(v, what+": body")
		case "delay_ms":
			f.DelayMS, _ = d.int(v, what+": delay_ms")
		case "disconnect_after_bytes":
			if n, ok := d.int(v, what+": disconnect_after_bytes"); ok {
				f.DisconnectAfterBytes = &n
			}
		case "disconnect_after_events":
			if n, ok := d.int(v, what+": disconnect_after_events"); ok {
				f.DisconnectAfterEvents = &n
			}
		case "stall":
			f.Stall, _ = d.bool(v, what+": stall")
		}
	})
	return f
}

// headers reads a mapping of header names to string values.
func (d *decoder) headers(n *yaml.Node, what string) map[string]string {
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, "%s: want a mapping of header names to values", what)
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
			d.errorf(k.Line, "%s: header %q given twice (first on line %d); keep one", what, name, first)
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
		d.errorf(n.Line, "%s: want a string, got %s; put the value in quotes", what, got)
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
	d.errorf(n.Line, "%s: want true or false without quotes, got %s", what, got)
	return false, false
}

// int reads an integer scalar.
func (d *decoder) int(n *yaml.Node, what string) (int, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, err := strconv.Atoi(n.Value); err == nil {
			return v, true
		}
	}
	d.errorf(n.Line, "%s: want a whole number, got %q", what, n.Value)
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
	d.errorf(n.Line, "%s: want a list", what)
	return nil
}

// toJSON writes a YAML value as JSON, keeping the order of mappings, and
// reports whether it could.
func (d *decoder) toJSON(b *bytes.Buffer, n *yaml.Node, what string, depth int) bool {
	if depth > maxJSONDepth {
		d.errorf(n.Line, "%s: nested too deeply", what)
		return false
	}
	switch n.Kind {
	case yaml.AliasNode:
		d.errorf(n.Line, "%s: YAML aliases are not supported; write the value out", what)
		return false
	case yaml.MappingNode:
		b.WriteByte('{')
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				d.errorf(k.Line, "%s: keys must be plain names", what)
				return false
			}
			if first, dup := seen[k.Value]; dup {
				d.errorf(k.Line, "%s: key %q given twice (first on line %d); keep one", what, k.Value, first)
				return false
			}
			seen[k.Value] = k.Line
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSONString(b, k.Value)
			b.WriteByte(':')
			if !d.toJSON(b, v, what, depth+1) {
				return false
			}
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, item := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if !d.toJSON(b, item, what, depth+1) {
				return false
			}
		}
		b.WriteByte(']')
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str", "!!timestamp":
			writeJSONString(b, n.Value)
		case "!!null":
			b.WriteString("null")
		case "!!bool":
			v, err := strconv.ParseBool(strings.ToLower(n.Value))
			if err != nil {
				d.errorf(n.Line, "%s: %q is not true or false", what, n.Value)
				return false
			}
			b.WriteString(strconv.FormatBool(v))
		case "!!int", "!!float":
			if isJSONNumber(n.Value) {
				b.WriteString(n.Value)
				break
			}
			f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
			if n.Tag == "!!int" {
				var i int64
				i, err = strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
				f = float64(i)
			}
			if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				d.errorf(n.Line, "%s: %q is not a number JSON can hold; put it in quotes for a string", what, n.Value)
				return false
			}
			b.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
		default:
			d.errorf(n.Line, "%s: %s values have no JSON form; put the value in quotes for a string", what, n.Tag)
			return false
		}
	default:
		d.errorf(n.Line, "%s: not a value", what)
		return false
	}
	return true
}

// isJSONNumber reports whether s is a number as JSON writes it.
func isJSONNumber(s string) bool {
	var n json.Number
	return json.Unmarshal([]byte(s), &n) == nil
}

// writeJSONString writes s as a JSON string, without HTML escaping.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	b.Truncate(b.Len() - 1)
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
// and tab indentation. (A copy of netpolicy's: this package imports no
// other sbx package.)
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
