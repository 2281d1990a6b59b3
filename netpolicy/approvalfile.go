package netpolicy

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// approvalFileMu serializes AddApprovedRule, so that two answers never
// write one file at once.
var approvalFileMu sync.Mutex

// ErrNotYAML is returned by AddApprovedRule for a JSON policy file, which
// cannot keep the comment an approved rule carries.
var ErrNotYAML = errors.New("not a YAML policy file")

// AddApprovedRule adds r, the rule of an answer that reaches later runs
// (docs/gateway.md), to the YAML policy file at path: before the file's
// first ask rule, or last when it has none (as the running policy gets
// it), with comment as a comment line above it. The file's other rules,
// fields and comments are kept, in their order; a file that does not exist
// is made, as "version: 1" and the rule. The file is replaced atomically
// (a temporary file in its directory, synced, then renamed over it, with
// the old file's mode), and only when the result decodes as a policy: a
// reader sees the old file or the new one, never a part.
//
// A JSON file gives ErrNotYAML; a file that is not a policy (a list, a
// scalar, rules that are not a list) gives an error wrapping
// ErrInvalidPolicy. It is safe for concurrent use.
func AddApprovedRule(path string, r Rule, comment string) error {
	approvalFileMu.Lock()
	defer approvalFileMu.Unlock()
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real // replace the file a link names, not the link
	}
	data, err := os.ReadFile(path)
	mode := fs.FileMode(0o644)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data = nil
	case err != nil:
		return fmt.Errorf("reading %s to add an approved rule: %w", path, err)
	default:
		if fi, err := os.Stat(path); err == nil {
			mode = fi.Mode().Perm()
		}
	}
	trimmed := bytes.TrimSpace(data)
	if strings.HasSuffix(path, ".json") || len(trimmed) > 0 && trimmed[0] == '{' {
		return fmt.Errorf("%s: %w: JSON keeps no comments; write always answers to a YAML policy file", path, ErrNotYAML)
	}
	var doc yaml.Node
	if len(trimmed) > 0 {
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return fmt.Errorf("%s: %w: %v", path, ErrInvalidPolicy, err)
		}
	}
	if doc.Kind == 0 || doc.Kind == yaml.DocumentNode && len(doc.Content) == 0 {
		doc.Kind = yaml.DocumentNode
		doc.Content = []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "version"}, {Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(FormatVersion)},
		}}}
	}
	root := doc.Content[0]
	if doc.Kind != yaml.DocumentNode || root.Kind != yaml.MappingNode {
		return fmt.Errorf("%s: %w: the file is not a policy (a mapping with version and rules); give approvals a file of their own", path, ErrInvalidPolicy)
	}
	var rules *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "rules" {
			rules = root.Content[i+1]
		}
	}
	if rules == nil || rules.Kind == yaml.ScalarNode && rules.Tag == "!!null" {
		if rules == nil {
			rules = &yaml.Node{}
			root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "rules"}, rules)
		}
		*rules = yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	}
	if rules.Kind != yaml.SequenceNode {
		return fmt.Errorf("%s: %w: rules is not a list", path, ErrInvalidPolicy)
	}
	rules.Style = 0 // a flow list ([...]) cannot hold the comment
	pos := len(rules.Content)
	for i, item := range rules.Content {
		if nodeField(item, "action") == string(Ask) {
			pos = i
			break
		}
	}
	item := ruleNode(r)
	item.HeadComment = "# " + strings.ReplaceAll(comment, "\n", " ")
	rules.Content = append(rules.Content[:pos], append([]*yaml.Node{item}, rules.Content[pos:]...)...)

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return fmt.Errorf("%s: writing the approved rule: %w", path, err)
	}
	enc.Close()
	if _, err := Decode(path, buf.Bytes()); err != nil {
		return fmt.Errorf("%s with the approved rule would not be a valid policy, so it is left as it was: %w", path, err)
	}
	return writeFileAtomic(path, buf.Bytes(), mode)
}

// nodeField returns the scalar value of key in the mapping n, or "".
func nodeField(n *yaml.Node, key string) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key && n.Content[i+1].Kind == yaml.ScalarNode {
			return n.Content[i+1].Value
		}
	}
	return ""
}

// ruleNode is r as a YAML mapping: host, ports (a flow list), action.
func ruleNode(r Rule) *yaml.Node {
	str := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	n.Content = append(n.Content, str("host"), str(r.Host))
	if r.Ports != nil {
		ports := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for _, p := range r.Ports {
			if p == AnyPort {
				ports.Content = append(ports.Content, str("*"))
			} else {
				ports.Content = append(ports.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: p.String()})
			}
		}
		n.Content = append(n.Content, str("ports"), ports)
	}
	n.Content = append(n.Content, str("action"), str(string(r.Action)))
	return n
}

// writeFileAtomic replaces path with data: a temporary file in the same
// directory, written, synced and renamed over path.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) (retErr error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
