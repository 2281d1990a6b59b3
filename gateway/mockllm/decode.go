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

	"github.com/sbx-dev/sbx/netpolicy/strictyaml"
	"go.yaml.in/yaml/v3"
)

// Scripts are decoded as policies are, with netpolicy/strictyaml: a
// document (YAML, or JSON turned into the same node tree) is walked node
// by node so that every problem is reported with its line, unknown fields
// are errors with a suggestion, and YAML's loose typing ("yes", 1e3 for a
// string) is refused.

// MaxScriptSize is the largest script ParseScript, ParseScriptFile and
// DecodeTurns read: room for long recorded streams, and a bound on the
// memory the YAML parser takes.
const MaxScriptSize = 32 << 20

// maxJSONDepth bounds the nesting of a JSON document and of a tool call's
// input.
const maxJSONDepth = 64

// ErrInvalidScript is what every ParseError unwraps to.
var ErrInvalidScript = errors.New("invalid mock LLM script")

// ParseError is one problem with a script. File is the name given to the
// decoder; Line is 1-based, 0 when unknown. Its Err is ErrInvalidScript.
type ParseError = strictyaml.Error

// ErrorList is every problem found in a script, in the order of the
// document; errors.Is finds ErrInvalidScript in it.
type ErrorList = strictyaml.ErrorList

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
	d := newDecoder(name)
	root := d.Parse(data)
	if root == nil {
		return nil, d.Errs
	}
	var s Script
	d.Fields(root, "script", scriptFields, func(key string, k, v *yaml.Node) {
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
	d := newDecoder(name)
	root := d.Parse(data)
	if root == nil {
		return nil, d.Errs
	}
	var turns []Turn
	switch {
	case root.Kind == yaml.SequenceNode:
		turns = d.turns(root)
	case root.Kind == yaml.MappingNode && hasKey(root, "turns"):
		d.Fields(root, "script", scriptFields, func(key string, k, v *yaml.Node) {
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

// decoder reads a script's node tree (strictyaml: YAML, or JSON turned
// into the same tree) and collects every problem with its line.
type decoder struct {
	strictyaml.Decoder
}

// newDecoder returns a decoder of the script called name.
func newDecoder(name string) decoder {
	return decoder{strictyaml.Decoder{File: name, Kind: strictyaml.Kind{
		Noun: "script", Start: "turns:", MaxSize: MaxScriptSize, MaxJSONDepth: maxJSONDepth, JSONLists: true, Invalid: ErrInvalidScript}}}
}

// errorf records a problem with the script.
func (d *decoder) errorf(line int, format string, args ...any) {
	d.Errorf(line, ErrInvalidScript, format, args...)
}

// err returns the problems sorted by line, or nil.
func (d *decoder) err() error {
	if len(d.Errs) == 0 {
		return nil
	}
	sort.SliceStable(d.Errs, func(i, j int) bool { return d.Errs[i].Line < d.Errs[j].Line })
	return d.Errs
}

var (
	scriptFields   = []string{"turns"}
	turnFields     = []string{"match", "reply", "fault", "times"}
	matchFields    = []string{"model", "user", "user_regexp", "tool_result", "normalize"}
	replyFields    = []string{"text", "tool_calls", "stop_reason", "usage", "chunk_size", "chunk_delay_ms", "raw"}
	toolCallFields = []string{"id", "name", "input", "custom"}
	usageFields    = []string{"input_tokens", "output_tokens"}
	rawFields      = []string{"dialect", "events", "body"}
	faultFields    = []string{"status", "headers", "body", "delay_ms", "disconnect_after_bytes", "disconnect_after_events", "stall"}
)

// turns decodes a list of turns.
func (d *decoder) turns(n *yaml.Node) []Turn {
	items := d.Seq(n, "turns")
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
	before := len(d.Errs)
	// lines maps the path of each field ("reply.chunk_size") to its line.
	lines := map[string]int{}
	ok := d.Fields(n, what, turnFields, func(key string, k, v *yaml.Node) {
		lines[key] = k.Line
		switch key {
		case "times":
			if v.Kind == yaml.ScalarNode && v.Tag == "!!str" && v.Value == "unlimited" {
				t.Times = Unlimited
				return
			}
			if v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
				d.errorf(v.Line, "%s: times: %q: want a number of requests, or unlimited", what, v.Value)
				return
			}
			if n, ok := d.Int(v, what+": times"); ok {
				if n < 1 {
					d.errorf(v.Line, "%s: times: %d: want 1 or more, or unlimited (leave it out for 1)", what, n)
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
	if !ok || len(d.Errs) > before {
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
	return t, len(d.Errs) == before
}

// origin names a line of the document, such as "script.yaml:12".
func (d *decoder) origin(line int) string {
	switch {
	case d.File == "":
		return fmt.Sprintf("line %d", line)
	case line == 0:
		return d.File
	}
	return fmt.Sprintf("%s:%d", d.File, line)
}

func (d *decoder) match(n *yaml.Node, what string, lines map[string]int) *Match {
	m := &Match{}
	d.Fields(n, what, matchFields, func(key string, k, v *yaml.Node) {
		lines["match."+key] = k.Line
		if key == "normalize" {
			m.Normalize, _ = d.Bool(v, what+": normalize")
			return
		}
		s, ok := d.Str(v, what+": "+key)
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
	d.Fields(n, what, replyFields, func(key string, k, v *yaml.Node) {
		lines["reply."+key] = k.Line
		switch key {
		case "text":
			r.Text, _ = d.Str(v, what+": text")
		case "stop_reason":
			r.StopReason, _ = d.Str(v, what+": stop_reason")
		case "chunk_size":
			if n, ok := d.Int(v, what+": chunk_size"); ok {
				if n < 1 {
					d.errorf(v.Line, "%s: chunk_size: %d: want 1 or more (leave it out for %d)", what, n, DefaultChunkSize)
				}
				r.ChunkSize = n
			}
		case "chunk_delay_ms":
			r.ChunkDelayMS, _ = d.Int(v, what+": chunk_delay_ms")
		case "usage":
			u := &Usage{}
			d.Fields(v, what+": usage", usageFields, func(key string, k, v *yaml.Node) {
				switch key {
				case "input_tokens":
					u.InputTokens, _ = d.Int(v, what+": usage: input_tokens")
				case "output_tokens":
					u.OutputTokens, _ = d.Int(v, what+": usage: output_tokens")
				}
			})
			r.Usage = u
		case "tool_calls":
			r.ToolCalls = []ToolCall{}
			for i, item := range d.Seq(v, what+": tool_calls") {
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
	d.Fields(n, what, toolCallFields, func(key string, k, v *yaml.Node) {
		switch key {
		case "id":
			c.ID, _ = d.Str(v, what+": id")
		case "name":
			c.Name, _ = d.Str(v, what+": name")
		case "input":
			if v.Kind != yaml.MappingNode {
				if v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
					d.errorf(v.Line, "%s: input must be a mapping of argument names to values; for the input text of a custom tool (OpenAI Responses), write custom: in its place", what)
					return
				}
				d.errorf(v.Line, "%s: input must be a mapping of argument names to values", what)
				return
			}
			var b bytes.Buffer
			if d.toJSON(&b, v, what+": input", 0) {
				c.Input = json.RawMessage(b.Bytes())
			}
		case "custom":
			if s, ok := d.Str(v, what+": custom"); ok {
				c.Custom = &s
			}
		}
	})
	return c
}

func (d *decoder) raw(n *yaml.Node, what string, lines map[string]int) *Raw {
	r := &Raw{}
	d.Fields(n, what, rawFields, func(key string, k, v *yaml.Node) {
		lines["reply.raw."+key] = k.Line
		switch key {
		case "dialect":
			s, _ := d.Str(v, what+": dialect")
			r.Dialect = Dialect(s)
		case "body":
			r.Body, _ = d.Str(v, what+": body")
		case "events":
			r.Events = d.Strs(v, what+": events", what+": event")
		}
	})
	return r
}

func (d *decoder) fault(n *yaml.Node, what string, lines map[string]int) *Fault {
	f := &Fault{}
	d.Fields(n, what, faultFields, func(key string, k, v *yaml.Node) {
		lines["fault."+key] = k.Line
		switch key {
		case "status":
			f.Status, _ = d.Int(v, what+": status")
		case "headers":
			f.Headers = d.Headers(v, what+": headers", ErrInvalidScript)
		case "body":
			f.Body, _ = d.Str(v, what+": body")
		case "delay_ms":
			f.DelayMS, _ = d.Int(v, what+": delay_ms")
		case "disconnect_after_bytes":
			if n, ok := d.Int(v, what+": disconnect_after_bytes"); ok {
				f.DisconnectAfterBytes = &n
			}
		case "disconnect_after_events":
			if n, ok := d.Int(v, what+": disconnect_after_events"); ok {
				f.DisconnectAfterEvents = &n
			}
		case "stall":
			f.Stall, _ = d.Bool(v, what+": stall")
		}
	})
	return f
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
