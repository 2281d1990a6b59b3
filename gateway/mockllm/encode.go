package mockllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// WriteScript writes turns as a script that ParseScript reads back to the
// same turns (Origin aside). Recorded answers (Reply.Raw) are written as
// double-quoted strings, so that every byte survives.
func WriteScript(w io.Writer, turns []Turn) error {
	if err := CheckTurns(turns); err != nil {
		return fmt.Errorf("writing mock LLM script: %w", err)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(scriptNode(turns)); err != nil {
		return fmt.Errorf("writing mock LLM script: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("writing mock LLM script: %w", err)
	}
	return nil
}

// MarshalYAML returns the script as WriteScript writes it, so that
// yaml.Marshal(script) works too.
func (s *Script) MarshalYAML() (any, error) {
	if err := CheckTurns(s.Turns); err != nil {
		return nil, err
	}
	return scriptNode(s.Turns), nil
}

func scriptNode(turns []Turn) *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for i := range turns {
		seq.Content = append(seq.Content, turnNode(&turns[i]))
	}
	return mapping("turns", seq)
}

func turnNode(t *Turn) *yaml.Node {
	n := mapping()
	if m := t.Match; m != nil && *m != (Match{}) {
		mn := mapping()
		addStr(mn, "model", m.Model)
		addStr(mn, "user", m.User)
		addStr(mn, "user_regexp", m.UserRegexp)
		addStr(mn, "tool_result", m.ToolResult)
		if m.Normalize {
			add(mn, "normalize", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
		}
		add(n, "match", mn)
	}
	if r := t.Reply; r != nil {
		rn := mapping()
		addStr(rn, "text", r.Text)
		if len(r.ToolCalls) > 0 {
			calls := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for _, c := range r.ToolCalls {
				cn := mapping()
				addStr(cn, "id", c.ID)
				addStr(cn, "name", c.Name)
				if len(c.Input) > 0 {
					add(cn, "input", jsonNode(c.Input))
				}
				if c.Custom != nil {
					add(cn, "custom", exactStr(*c.Custom))
				}
				calls.Content = append(calls.Content, cn)
			}
			add(rn, "tool_calls", calls)
		}
		addStr(rn, "stop_reason", r.StopReason)
		if u := r.Usage; u != nil {
			un := mapping()
			add(un, "input_tokens", intNode(u.InputTokens))
			add(un, "output_tokens", intNode(u.OutputTokens))
			un.Style = yaml.FlowStyle
			add(rn, "usage", un)
		}
		addInt(rn, "chunk_size", r.ChunkSize)
		addInt(rn, "chunk_delay_ms", r.ChunkDelayMS)
		if raw := r.Raw; raw != nil {
			wn := mapping()
			addStr(wn, "dialect", string(raw.Dialect))
			if len(raw.Events) > 0 {
				events := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
				for _, e := range raw.Events {
					events.Content = append(events.Content, exactStr(e))
				}
				add(wn, "events", events)
			}
			if raw.Body != "" {
				add(wn, "body", exactStr(raw.Body))
			}
			add(rn, "raw", wn)
		}
		if len(rn.Content) == 0 {
			rn.Style = yaml.FlowStyle // reply: {}
		}
		add(n, "reply", rn)
	}
	if f := t.Fault; f != nil {
		fn := mapping()
		addInt(fn, "status", f.Status)
		if len(f.Headers) > 0 {
			hn := mapping()
			names := make([]string, 0, len(f.Headers))
			for name := range f.Headers {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				add(hn, name, str(f.Headers[name]))
			}
			add(fn, "headers", hn)
		}
		if f.Body != "" {
			add(fn, "body", exactStr(f.Body))
		}
		addInt(fn, "delay_ms", f.DelayMS)
		if f.DisconnectAfterBytes != nil {
			add(fn, "disconnect_after_bytes", intNode(*f.DisconnectAfterBytes))
		}
		if f.DisconnectAfterEvents != nil {
			add(fn, "disconnect_after_events", intNode(*f.DisconnectAfterEvents))
		}
		if f.Stall {
			add(fn, "stall", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
		}
		add(n, "fault", fn)
	}
	switch {
	case t.Times > 1:
		add(n, "times", intNode(t.Times))
	case t.Times == Unlimited:
		add(n, "times", str("unlimited"))
	}
	return n
}

// mapping returns a mapping node with the given key and value nodes.
func mapping(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		add(n, kv[i].(string), kv[i+1].(*yaml.Node))
	}
	return n
}

func add(n *yaml.Node, key string, v *yaml.Node) {
	n.Content = append(n.Content, str(key), v)
}

func addStr(n *yaml.Node, key, v string) {
	if v != "" {
		add(n, key, str(v))
	}
}

func addInt(n *yaml.Node, key string, v int) {
	if v != 0 {
		add(n, key, intNode(v))
	}
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

// exactStr is a string written double-quoted, with escapes: a recorded
// answer keeps its trailing blank lines, carriage returns and spaces.
func exactStr(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

func intNode(v int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(v)}
}

// jsonNode turns a JSON value into YAML, keeping the order of objects. A
// value that is not valid JSON (CheckTurns refuses it) becomes a string.
func jsonNode(data []byte) *yaml.Node {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var value func() (*yaml.Node, error)
	value = func() (*yaml.Node, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch v := tok.(type) {
		case json.Delim:
			n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			if v == '{' {
				n.Kind, n.Tag = yaml.MappingNode, "!!map"
			}
			for dec.More() {
				if n.Kind == yaml.MappingNode {
					k, err := dec.Token()
					if err != nil {
						return nil, err
					}
					key, _ := k.(string)
					n.Content = append(n.Content, str(key))
				}
				child, err := value()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, child)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			if len(n.Content) == 0 {
				n.Style = yaml.FlowStyle
			}
			return n, nil
		case string:
			return str(v), nil
		case json.Number:
			tag := "!!float"
			if _, err := v.Int64(); err == nil {
				tag = "!!int"
			}
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v.String()}, nil
		case bool:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}, nil
		default:
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
		}
	}
	n, err := value()
	if err != nil {
		return str(string(data))
	}
	return n
}
