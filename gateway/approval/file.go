package approval

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sbx-dev/sbx/netpolicy"
)

// approvalFileMu serializes AddApprovedRule, so that two answers never
// write one file at once, and guards pins.
var approvalFileMu sync.Mutex

// ErrNotYAML is returned by AddApprovedRule for a JSON policy file, which
// cannot keep the comment an approved rule carries.
var ErrNotYAML = errors.New("not a YAML policy file")

// ErrPathChanged is returned by AddApprovedRule for a file pinned
// by PinFile when its path no longer leads where it led then: a
// symbolic link stands at the file's name, or the file's directory is gone
// or another (a link to elsewhere, say) stands at its path. Whatever did
// it (a sandbox can write where the file usually lies), nothing is
// written, through the link or elsewhere.
var ErrPathChanged = errors.New("the approvals file's path changed since the start")

// ErrFileUntrusted is wrapped by the errors of an approvals file
// sbx does not read or write: one on a path through a symbolic link, not
// a regular file, owned by another user than root or the one running sbx
// (netpolicy.TrustedOwner), writable by its group or others, or larger than
// MaxFileSize. The error says which, and the fix.
var ErrFileUntrusted = errors.New("approvals file refused")

// MaxFileSize is the most an approvals file may hold: sbx reads
// no more of it, so that a file grown (or made sparse) by someone else
// cannot make an always answer take the gateway's memory.
const MaxFileSize = 1 << 20

// LockWait is how long AddApprovedRule waits for the approvals
// file's lock, which another sbx process answering always holds only
// while it writes; past it the answer fails and nothing is written.
const LockWait = 10 * time.Second

// untrustedFileError is the refusal of the approvals file at path for
// why, with the fix.
func untrustedFileError(path, why, fix string) error {
	return fmt.Errorf("%s: %w: %s, so nothing was written; %s", path, ErrFileUntrusted, why, fix)
}

// tooLargeError refuses the approvals file at path, of size bytes.
func tooLargeError(path string, size int64) error {
	return untrustedFileError(path, fmt.Sprintf("it holds %d bytes, more than the %d (1 MiB) sbx reads from an approvals file", size, MaxFileSize),
		"move its rules into a policy file, or give --approvals a new file")
}

// checkApprovalsFileMode refuses the approvals file at path, of owner
// uid and mode perm, when sbx must not trust its rules: another user
// owns it, or its group or others may write it.
func checkApprovalsFileMode(path string, uid uint32, perm os.FileMode) error {
	switch {
	case !netpolicy.TrustedOwner(uid):
		return untrustedFileError(path, fmt.Sprintf("it is owned by uid %d, neither root nor the user running sbx, who could change the rules later runs read from it", uid),
			"give --approvals a file of your own (chown it, or copy its rules into a new file)")
	case perm&0o022 != 0:
		return untrustedFileError(path, fmt.Sprintf("its mode %04o lets its group or others write it, and so change the rules later runs read from it", perm),
			"chmod go-w "+path)
	}
	return nil
}

// pins are the files PinFile resolved, by absolute path.
var pins = map[string]*pin{}

// A pin is one pinned file: its directory kept open (or why it could not
// be), for refs callers.
type pin struct {
	refs int
	d    *approvalsDir
	err  error
}

// PinFile opens the directory of path, a file AddApprovedRule is
// to write, now, and keeps it open until release is called (a descriptor
// on Linux). On Linux no symbolic link on the way is followed: a path
// through one is refused (ErrFileUntrusted, naming the link and
// the real path to give instead). Until release every
// AddApprovedRule(path, ...) reads and writes the file through that
// directory, not through path: a link planted later at the file's name is
// refused, and one planted in place of a directory on the way is not
// followed (ErrPathChanged either way). A caller pins the file
// before anything untrusted can write near it, as sbx run does before it
// starts the sandbox. When path cannot be opened now (its directory does
// not exist, a link is on the way), the pin keeps that error, which
// AddApprovedRule returns: a directory made later is not trusted.
// Pinning a pinned path shares the pin; each release undoes one
// PinFile, and only the first call of a release does anything.
func PinFile(path string) (release func()) {
	key := pinKey(path)
	approvalFileMu.Lock()
	defer approvalFileMu.Unlock()
	p := pins[key]
	if p == nil {
		p = &pin{}
		p.d, p.err = openApprovalsDir(path)
		pins[key] = p
	}
	p.refs++
	var once sync.Once
	return func() {
		once.Do(func() {
			approvalFileMu.Lock()
			defer approvalFileMu.Unlock()
			if p.refs--; p.refs == 0 {
				delete(pins, key)
				if p.d != nil {
					p.d.close()
				}
			}
		})
	}
}

// pinKey is the key of path in pins: its absolute, clean form.
func pinKey(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return filepath.Clean(path)
}

// resolveApprovalsPath returns the directory, without symbolic links, and
// the name in it of the file at path: the file a link at path names, or
// path's own name when nothing is there yet (or a link to nothing, which
// writing refuses).
func resolveApprovalsPath(path string) (dir, name string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", "", fmt.Errorf("approvals file %s: %w", path, err)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return filepath.Dir(real), filepath.Base(real), nil // the file a link names, not the link
	}
	dir, err = filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", "", fmt.Errorf("approvals file %s: its directory cannot be resolved (make it before the run, or give another file): %w", path, err)
	}
	return dir, filepath.Base(abs), nil
}

// linkAtNameError is the refusal of a symbolic link at the approvals
// file's name, to target.
func linkAtNameError(path, target string) error {
	return fmt.Errorf("%s: %w: it is now a symbolic link (to %s), which may have been planted to make sbx write elsewhere, so nothing was written; "+
		"remove the link (put the file there if it was yours) and answer again, or answer for the session", path, ErrPathChanged, target)
}

// movedDirError is the refusal of a directory that is no longer at its
// path (why says what is there now).
func movedDirError(path, dir, why string) error {
	return fmt.Errorf("%s: %w: its directory %s %s, so nothing was written; "+
		"answer for the session, and add the rule to the file yourself", path, ErrPathChanged, dir, why)
}

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
// The read, the change and the write happen under an advisory lock
// (flock) on a lock file beside the file (".NAME.lock"), which every sbx
// process takes to write the file: two processes answering always at
// once both keep their rules. It waits for the lock for at most
// LockWait. The file is read with a bound: one larger than
// MaxFileSize, owned by someone else than netpolicy.TrustedOwner, or
// writable by its group or others, is refused (ErrFileUntrusted).
//
// A path pinned by PinFile is read and written through the
// directory opened then, and a symbolic link at its name is refused:
// see ErrPathChanged. Another path's directory is opened now.
// On Linux, no link on the way is ever followed.
//
// A JSON file gives ErrNotYAML; a file that is not a policy (a list, a
// scalar, rules that are not a list) gives an error wrapping
// netpolicy.ErrInvalidPolicy. It is safe for concurrent use.
func AddApprovedRule(path string, r netpolicy.Rule, comment string) error {
	approvalFileMu.Lock()
	defer approvalFileMu.Unlock()
	d, done, err := approvalsDirOf(path)
	if err != nil {
		return err
	}
	defer done()
	path = d.path
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	data, mode, err := d.read()
	if err != nil {
		return err
	}
	trimmed := bytes.TrimSpace(data)
	if strings.HasSuffix(path, ".json") || len(trimmed) > 0 && trimmed[0] == '{' {
		return fmt.Errorf("%s: %w: JSON keeps no comments; write always answers to a YAML policy file", path, ErrNotYAML)
	}
	var doc yaml.Node
	if len(trimmed) > 0 {
		if err := yaml.Unmarshal(data, &doc); err != nil {
			return fmt.Errorf("%s: %w: %v", path, netpolicy.ErrInvalidPolicy, err)
		}
	}
	if doc.Kind == 0 || doc.Kind == yaml.DocumentNode && len(doc.Content) == 0 {
		doc.Kind = yaml.DocumentNode
		doc.Content = []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "version"}, {Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(netpolicy.FormatVersion)},
		}}}
	}
	root := doc.Content[0]
	if doc.Kind != yaml.DocumentNode || root.Kind != yaml.MappingNode {
		return fmt.Errorf("%s: %w: the file is not a policy (a mapping with version and rules); give approvals a file of their own", path, netpolicy.ErrInvalidPolicy)
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
		return fmt.Errorf("%s: %w: rules is not a list", path, netpolicy.ErrInvalidPolicy)
	}
	rules.Style = 0 // a flow list ([...]) cannot hold the comment
	pos := len(rules.Content)
	for i, item := range rules.Content {
		if nodeField(item, "action") == string(netpolicy.Ask) {
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
	if _, err := netpolicy.Decode(path, buf.Bytes()); err != nil {
		return fmt.Errorf("%s with the approved rule would not be a valid policy, so it is left as it was: %w", path, err)
	}
	return d.replace(buf.Bytes(), mode)
}

// approvalsDirOf returns the directory AddApprovedRule reads and writes
// path through, and what to call when done: path's pin's (or its error),
// else one resolved now, closed by done. The caller holds approvalFileMu.
func approvalsDirOf(path string) (d *approvalsDir, done func(), err error) {
	if p := pins[pinKey(path)]; p != nil {
		return p.d, func() {}, p.err
	}
	if d, err = openApprovalsDir(path); err != nil {
		return nil, nil, err
	}
	return d, d.close, nil
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

// ruleNode is r as a YAML mapping: host, ports and methods (flow lists),
// path, action.
func ruleNode(r netpolicy.Rule) *yaml.Node {
	str := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	n.Content = append(n.Content, str("host"), str(r.Host))
	if r.Ports != nil {
		ports := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for _, p := range r.Ports {
			if p == netpolicy.AnyPort {
				ports.Content = append(ports.Content, str("*"))
			} else {
				ports.Content = append(ports.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: p.String()})
			}
		}
		n.Content = append(n.Content, str("ports"), ports)
	}
	if len(r.Methods) > 0 {
		methods := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Style: yaml.FlowStyle}
		for _, m := range r.Methods {
			methods.Content = append(methods.Content, str(m))
		}
		n.Content = append(n.Content, str("methods"), methods)
	}
	if r.Path != "" {
		n.Content = append(n.Content, str("path"), str(r.Path))
	}
	n.Content = append(n.Content, str("action"), str(string(r.Action)))
	return n
}
