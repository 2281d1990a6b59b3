package netpolicy

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"

	"github.com/sbx-dev/sbx/netpolicy/strictyaml"
	"go.yaml.in/yaml/v3"
)

// MaxPolicySize is the largest policy document Parse and ParseFile read:
// ample for tens of thousands of rules, and a bound on the memory the YAML
// parser takes (some 90 times the document).
const MaxPolicySize = 4 << 20

// maxErrors is how many problems a document is reported with at most.
const maxErrors = strictyaml.MaxErrors

// maxJSONDepth bounds the nesting of a JSON document; a policy needs four
// levels.
const maxJSONDepth = 32

// ParseError is one problem with a policy document. File is the name given
// to Parse (empty for Compile); Line is 1-based, 0 when unknown. Its Err is
// ErrInvalidPolicy or ErrInvalidRule.
type ParseError = strictyaml.Error

// ErrorList is every problem found in a policy, in the order of the
// document. Compile, Decode, Parse and ParseFile return one; errors.Is
// finds ErrInvalidPolicy and ErrInvalidRule in it.
type ErrorList = strictyaml.ErrorList

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
	d := newDecoder(name)
	root := d.Parse(data)
	if root == nil {
		return Spec{}, d.Errs
	}
	spec := d.spec(root)
	if len(d.Errs) > 0 {
		sort.SliceStable(d.Errs, func(i, j int) bool { return d.Errs[i].Line < d.Errs[j].Line })
		return Spec{}, d.Errs
	}
	return spec, nil
}

// DecodeRule parses and checks a single rule, as the management API
// receives it (JSON or YAML). The rule's id is not assigned.
func DecodeRule(name string, data []byte) (Rule, error) {
	d := newDecoder(name)
	root := d.Parse(data)
	if root == nil {
		return Rule{}, d.Errs
	}
	r, _ := d.rule(root, "rule", map[string]int{})
	if len(d.Errs) > 0 {
		return Rule{}, d.Errs
	}
	return r, nil
}

// DecodeAddRule is DecodeRule for the body of the management API's
// POST /v1/policy/rules: a rule that may also carry "position", a whole
// number from 0 (first). position is -1 when the body has none, which
// Store.AddRule reads as "append".
func DecodeAddRule(name string, data []byte) (r Rule, position int, err error) {
	d := newDecoder(name)
	root := d.Parse(data)
	if root == nil {
		return Rule{}, 0, d.Errs
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
			if n, ok := d.Int(v, "rule: position"); ok {
				if n < 0 {
					d.Errorf(v.Line, ErrInvalidRule, "rule: position %d: want 0 (first) or more; leave it out to append", n)
				}
				position = n
			}
		}
		root.Content = kept
	}
	r, _ = d.rule(root, "rule", map[string]int{})
	if len(d.Errs) > 0 {
		return Rule{}, 0, d.Errs
	}
	return r, position, nil
}

// decoder reads a policy document's node tree (strictyaml: YAML, or JSON
// turned into the same tree) and collects every problem with its line.
type decoder struct {
	strictyaml.Decoder
}

// newDecoder returns a decoder of the policy document called name.
func newDecoder(name string) decoder {
	return decoder{strictyaml.Decoder{File: name, Kind: strictyaml.Kind{
		Noun: "policy", Start: "version: 1", MaxSize: MaxPolicySize, MaxJSONDepth: maxJSONDepth, Invalid: ErrInvalidPolicy}}}
}

var (
	specFields     = []string{"version", "default", "mode", "allow_private", "rules", "ask_timeout", "secrets"}
	secretFields   = []string{"name", "from_env", "from_file", "hosts", "header", "methods", "paths"}
	ruleFields     = []string{"id", "host", "ports", "methods", "path", "action", "inspect", "response"}
	responseFields = []string{"status", "headers", "body", "llm"}
)

func (d *decoder) spec(n *yaml.Node) Spec {
	var spec Spec
	lines := map[string]int{}
	d.Fields(n, "policy", specFields, func(key string, k, v *yaml.Node) {
		lines[key] = k.Line
		switch key {
		case "version":
			if n, ok := d.Int(v, "version"); ok {
				if n != FormatVersion {
					d.Errorf(v.Line, ErrInvalidPolicy, "version: version %d is not supported; write version: %d", n, FormatVersion)
				}
				spec.Version = n
			}
		case "default":
			s, _ := d.Str(v, "default")
			spec.Default = Action(s)
		case "mode":
			s, _ := d.Str(v, "mode")
			spec.Mode = Mode(s)
		case "ask_timeout":
			if v.Kind == yaml.ScalarNode && (v.Tag == "!!int" || v.Tag == "!!float") {
				d.Errorf(v.Line, ErrInvalidPolicy, "ask_timeout: %s has no unit; write e.g. %ss", v.Value, v.Value)
			} else if s, ok := d.Str(v, "ask_timeout"); ok {
				if t, err := ParseAskTimeout(s); err != nil {
					d.Errorf(v.Line, ErrInvalidPolicy, "%s", err)
				} else {
					spec.AskTimeout = Duration(t)
				}
			}
		case "allow_private":
			for _, item := range d.Seq(v, "allow_private") {
				s, ok := d.Str(item, "allow_private entry")
				if !ok {
					continue
				}
				pfx, err := netip.ParsePrefix(s)
				if err != nil {
					if ip, ierr := netip.ParseAddr(s); ierr == nil {
						d.Errorf(item.Line, ErrInvalidPolicy, "allow_private: %q is an address; write a CIDR such as %s", s, netip.PrefixFrom(ip, ip.BitLen()))
					} else {
						d.Errorf(item.Line, ErrInvalidPolicy, "allow_private: %q is not a CIDR (want e.g. 10.0.0.0/8)", s)
					}
					continue
				}
				if _, err := normalizePrefix(pfx); err != nil {
					d.Errorf(item.Line, ErrInvalidPolicy, "allow_private: %s", err)
					continue
				}
				spec.AllowPrivate = append(spec.AllowPrivate, pfx)
			}
		case "rules":
			ids := map[string]int{}
			for i, item := range d.Seq(v, "rules") {
				if r, ok := d.rule(item, fmt.Sprintf("rule %d", i+1), ids); ok {
					spec.Rules = append(spec.Rules, r)
				}
			}
		case "secrets":
			for i, item := range d.Seq(v, "secrets") {
				spec.Secrets = append(spec.Secrets, d.secret(item, fmt.Sprintf("secret %d", i+1)))
			}
		}
	})
	// Check the top-level values the way Compile will, with lines.
	check := spec
	check.AllowPrivate = nil
	check.Version = 0 // checked above, with its line
	for _, fe := range checkSpecFields(&check) {
		d.Errorf(lines[fe.field], ErrInvalidPolicy, "%s: %s", fe.field, fe.msg)
	}
	return spec
}

// secret decodes a secret that messages call what; Compile checks it,
// and spec's check reports its problems on the line of secrets.
func (d *decoder) secret(n *yaml.Node, what string) Secret {
	var s Secret
	d.Fields(n, what, secretFields, func(key string, k, v *yaml.Node) {
		switch key {
		case "name":
			s.Name, _ = d.Str(v, what+": name")
		case "from_env":
			s.FromEnv, _ = d.Str(v, what+": from_env")
		case "from_file":
			s.FromFile, _ = d.Str(v, what+": from_file")
		case "hosts":
			for _, item := range d.Seq(v, what+": hosts") {
				if h, ok := d.Str(item, what+": host"); ok {
					s.Hosts = append(s.Hosts, h)
				}
			}
		case "header": // one name, or a list
			if v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
				if h, ok := d.Str(v, what+": header"); ok {
					s.Headers = []string{h}
				}
			} else {
				s.Headers = d.Strs(v, what+": header", what+": header")
			}
		case "methods":
			s.Methods = d.Strs(v, what+": methods", what+": method")
		case "paths":
			s.Paths = d.Strs(v, what+": paths", what+": path")
		}
	})
	return s
}

// rule decodes and checks a rule that messages call what; ids maps the ids
// seen so far to their lines.
func (d *decoder) rule(n *yaml.Node, what string, ids map[string]int) (Rule, bool) {
	var r Rule
	lines := map[string]int{}
	before := len(d.Errs)
	ok := d.Fields(n, what, ruleFields, func(key string, k, v *yaml.Node) {
		lines[key] = k.Line
		switch key {
		case "id":
			r.ID, _ = d.Str(v, what+": id")
		case "host":
			r.Host, _ = d.Str(v, what+": host")
		case "action":
			s, _ := d.Str(v, what+": action")
			r.Action = Action(s)
		case "path":
			r.Path, _ = d.Str(v, what+": path")
		case "inspect":
			r.Inspect, _ = d.Bool(v, what+": inspect")
		case "methods":
			r.Methods = d.Strs(v, what+": methods", what+": method")
		case "ports":
			r.Ports = []Port{}
			for _, item := range d.Seq(v, what+": ports") {
				if item.Kind != yaml.ScalarNode {
					d.Errorf(item.Line, ErrInvalidRule, "%s: ports: want a number from 1 to 65535 or \"*\"", what)
					continue
				}
				p, err := ParsePort(item.Value)
				if err != nil || (item.Tag != "!!int" && item.Value != "*") {
					d.Errorf(item.Line, ErrInvalidRule, "%s: ports: %q is not a port; want a number from 1 to 65535 or \"*\"", what, item.Value)
					continue
				}
				r.Ports = append(r.Ports, p)
			}
		case "response":
			r.Response = d.response(v, what)
		}
	})
	if !ok || len(d.Errs) > before {
		return r, false
	}
	if r.ID != "" {
		if first, dup := ids[r.ID]; dup {
			d.Errorf(lines["id"], ErrInvalidRule, "%s: id %q is already used on line %d; ids must be unique", what, r.ID, first)
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
			d.Errorf(line, ErrInvalidRule, "%s: %s", what, fe.msg)
		} else {
			d.Errorf(line, ErrInvalidRule, "%s: %s: %s", what, fe.field, fe.msg)
		}
	}
	return r, true
}

func (d *decoder) response(n *yaml.Node, what string) *Response {
	resp := &Response{}
	d.Fields(n, what+": response", responseFields, func(key string, k, v *yaml.Node) {
		switch key {
		case "status":
			resp.Status, _ = d.Int(v, what+": response: status")
		case "body":
			resp.Body, _ = d.Str(v, what+": response: body")
		case "headers":
			resp.Headers = d.Headers(v, what+": response: headers", ErrInvalidRule)
		case "llm":
			var ok bool
			if resp.LLM, ok = d.Str(v, what+": response: llm"); ok && resp.LLM == "" {
				d.Errorf(v.Line, ErrInvalidRule, "%s: response: llm: empty; give the script's path, relative to the policy file", what)
			}
		}
	})
	return resp
}
