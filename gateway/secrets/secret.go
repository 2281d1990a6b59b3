package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/sbx-dev/sbx/netpolicy"
)

// Rule is the rule of the records of requests the gateway blocked
// because they carried a secret's placeholder where the secret is not
// sent; their record's Secret names the secret. Such a block is enforced
// in every mode.
const Rule = "secret"

// PlaceholderPrefix starts every secret's placeholder:
// "sbx-secret-<NAME>-<random>".
const PlaceholderPrefix = "sbx-secret-"

// maxSize bounds a secret's value, and the file it is read from.
const maxSize = 16 << 10

// The errors an *Error wraps.
var (
	// ErrUnset is a variable that is not set.
	ErrUnset = errors.New("is not set")
	// ErrEmpty is a value that is empty, or only white space.
	ErrEmpty = errors.New("is empty")
	// ErrValue is a value that a header field cannot carry as it is: a
	// control character (a line break inside it), a byte that is not
	// ASCII, or more than 16 KiB.
	ErrValue = errors.New("holds what a header cannot carry (a control character, a line break inside it, a byte that is not ASCII, or more than 16 KiB)")
	// ErrName is a name that is not an environment variable name.
	ErrName = errors.New("is not an environment variable name (a letter or '_', then letters, digits and '_')")
)

// Error is a secret that cannot be used: its Name, where its value was
// to come from (Env, a variable, or File, a file: Read's; neither for a
// value given to New or FromSpec), and why: Err is ErrName, ErrUnset,
// ErrEmpty, ErrValue, or the error of reading File (a *fs.PathError).
// It never holds the value.
type Error struct {
	Name string
	Env  string
	File string
	Err  error
}

func (e *Error) Error() string {
	switch {
	case errors.Is(e.Err, ErrName):
		return fmt.Sprintf("secret %q: the name %v", e.Name, e.Err)
	case e.File != "" && !errors.Is(e.Err, ErrEmpty) && !errors.Is(e.Err, ErrValue):
		return fmt.Sprintf("secret %s: reading its value: %v", e.Name, e.Err)
	case e.File != "":
		return fmt.Sprintf("secret %s: the value in %s %v", e.Name, e.File, e.Err)
	case e.Env != "":
		return fmt.Sprintf("secret %s: the environment variable %s %v", e.Name, e.Env, e.Err)
	}
	return fmt.Sprintf("secret %s: the value %v", e.Name, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Secret is a value that the sandbox sees only as its placeholder, and
// that the gateway sends only to its hosts, in request headers. Make one
// with New, FromSpec or Read. Printing it (fmt, slog) shows its name,
// never its value.
type Secret struct {
	name        string
	placeholder string
	lower       string // placeholder, lower case: names are compared so
	value       string
	quoted      string // value as Go's %q writes it, without the quotes
	hosts       []netpolicy.SecretHost
	scope       netpolicy.SecretScope
	file        string // where the value was read from; "" for none
}

// New returns the secret name with value, sent to hosts
// (netpolicy.ParseSecretHost's HOST[:PORT]) in the default credential
// headers (netpolicy.DefaultSecretHeaders), with any method and path, and
// a placeholder of its own: "sbx-secret-<name>-" and 32 random hex
// digits, new on every call. value is trimmed of white space around it.
// A bad name or value is an *Error wrapping ErrName, ErrEmpty or
// ErrValue, which does not say where the value came from; a bad host
// wraps netpolicy.ErrInvalidPolicy.
func New(name, value string, hosts []string) (*Secret, error) {
	return FromSpec(netpolicy.Secret{Name: name, Hosts: hosts}, value)
}

// FromSpec is New for the binding spec (its name, hosts, header,
// methods and paths; its source is not looked at), for a caller that has
// the value already: a bad header, method or path wraps
// netpolicy.ErrInvalidPolicy.
func FromSpec(spec netpolicy.Secret, value string) (*Secret, error) {
	name, hosts := spec.Name, spec.Hosts
	if !netpolicy.ValidEnvName(name) {
		return nil, &Error{Name: name, Err: ErrName}
	}
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, &Error{Name: name, Err: ErrEmpty}
	}
	if !valueSafe(value) {
		return nil, &Error{Name: name, Err: ErrValue}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("secret %s: no hosts: %w", name, netpolicy.ErrInvalidPolicy)
	}
	scope, err := netpolicy.ParseSecretScope(spec)
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	q := strconv.Quote(value)
	s := &Secret{name: name, value: value, quoted: q[1 : len(q)-1], scope: scope}
	for _, h := range hosts {
		sh, err := netpolicy.ParseSecretHost(h)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", name, err)
		}
		s.hosts = append(s.hosts, sh)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("secret %s: making its placeholder: %w", name, err)
	}
	s.placeholder = PlaceholderPrefix + name + "-" + hex.EncodeToString(b[:])
	s.lower = strings.ToLower(s.placeholder)
	return s, nil
}

// Read reads the value of a policy's secret, from the environment
// variable spec.FromEnv (lookupEnv: nil means os.LookupEnv) or from the
// file spec.FromFile (relative to dir when not absolute), and returns it
// as FromSpec does. A value that cannot be had, or FromSpec refuses, is
// an *Error that says where the value came from.
func Read(spec netpolicy.Secret, dir string, lookupEnv func(string) (string, bool)) (*Secret, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	var value, path string
	fail := func(err error) (*Secret, error) {
		if spec.FromFile != "" {
			return nil, &Error{Name: spec.Name, File: spec.FromFile, Err: err}
		}
		return nil, &Error{Name: spec.Name, Env: spec.FromEnv, Err: err}
	}
	if spec.FromFile != "" {
		path = spec.FromFile
		if !filepath.IsAbs(path) && dir != "" {
			path = filepath.Join(dir, path)
		}
		f, err := os.Open(path)
		if err != nil {
			return fail(err)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxSize+2))
		f.Close()
		if err != nil {
			return fail(&os.PathError{Op: "read", Path: path, Err: err})
		}
		value = string(b)
	} else {
		v, ok := lookupEnv(spec.FromEnv)
		if !ok {
			return fail(ErrUnset)
		}
		value = v
	}
	sec, err := FromSpec(spec, value)
	var se *Error
	switch {
	case errors.As(err, &se):
		return fail(se.Err)
	case err != nil:
		return nil, err
	}
	if spec.FromFile != "" {
		sec.file = path
	}
	return sec, nil
}

// valueSafe reports whether v can be a header value as it is: visible
// ASCII, spaces and tabs, at most maxSize bytes.
func valueSafe(v string) bool {
	if len(v) > maxSize {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c > '~' {
			return false
		}
	}
	return true
}

// Name is the secret's name, the variable that holds its placeholder in
// the sandbox.
func (s *Secret) Name() string { return s.name }

// Placeholder is what the sandbox holds in place of the value.
func (s *Secret) Placeholder() string { return s.placeholder }

// Hosts are the hosts the value is sent to, normalized, each HOST:PORT.
func (s *Secret) Hosts() []string {
	hosts := make([]string, len(s.hosts))
	for i, h := range s.hosts {
		hosts[i] = h.String()
	}
	return hosts
}

// File is the file the value was read from, "" when it was not read
// from a file: a file the sandbox can read would give the value away.
func (s *Secret) File() string { return s.file }

// String names the secret, never its value.
func (s *Secret) String() string { return "secret " + s.name }

// GoString is String, so that %#v shows no value either.
func (s *Secret) GoString() string { return s.String() }

// LogValue is the secret in a log: its name.
func (s *Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// bound reports whether the value is sent to host (normalized) on port.
func (s *Secret) bound(host string, port uint16) bool {
	for _, h := range s.hosts {
		if h.Match(host, port) {
			return true
		}
	}
	return false
}

// Block is the decision of a request that carries the secret's
// placeholder to host, where its value is not sent: a block by Rule.
func (s *Secret) Block(host string) netpolicy.Decision {
	return netpolicy.Decision{Action: netpolicy.Block, Rule: Rule,
		Reason: fmt.Sprintf("secret %s's placeholder sent to %s", s.name, host)}
}

// placeholderRandom matches the random part of a placeholder: 32
// lower-case hex digits, as FromSpec makes them.
var placeholderRandom = regexp.MustCompile(`^[0-9a-f]{32}$`)

// WithPlaceholder returns a copy of the secret whose placeholder is
// placeholder instead of its own: one chosen elsewhere, where the
// sandbox's environment is made (sbx kube run sets the agent pod's
// variable, and its gateway pod takes the same placeholder). It must be
// what FromSpec makes: PlaceholderPrefix, the secret's name, '-' and 32
// lower-case hex digits.
func (s *Secret) WithPlaceholder(placeholder string) (*Secret, error) {
	random, ok := strings.CutPrefix(placeholder, PlaceholderPrefix+s.name+"-")
	if !ok || !placeholderRandom.MatchString(random) {
		return nil, fmt.Errorf("secret %s: placeholder %q: want %s%s- and 32 lower-case hex digits", s.name, placeholder, PlaceholderPrefix, s.name)
	}
	c := *s
	c.placeholder, c.lower = placeholder, strings.ToLower(placeholder)
	return &c, nil
}

// Value is the secret's value, for the one place it is handed on to a
// gateway that runs elsewhere: sbx kube run puts it in the sandbox's
// Kubernetes Secret, which only the gateway pod mounts. Nothing else
// calls it.
func (s *Secret) Value() string { return s.value }
