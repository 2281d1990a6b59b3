package main

import (
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sbx-dev/sbx/netpolicy"
)

// patternHelp shows the forms a host pattern on the command line takes; it
// follows every bad-pattern error.
const patternHelp = "a pattern is a host (example.com), *.example.com, an IP (203.0.113.7) or CIDR (10.0.0.0/8), " +
	"optionally with :PORT or :* (example.com:8080, [2001:db8::1]:443, *:443)"

// policyFlags are the policy flags of sbx run, sbx gateway and sbx policy
// check (docs/cli.md). The zero value stands for no flags: Build then gives
// the empty policy, which blocks everything.
type policyFlags struct {
	Policy       string   // --policy FILE
	Allow        []string // --allow PATTERN
	Block        []string // --block PATTERN
	Intercept    []string // --intercept PATTERN=FILE
	Inspect      []string // --inspect PATTERN
	AllowPrivate []string // --allow-private CIDR
	Default      string   // --default allow|block|ask; empty keeps the file's
	Audit        bool     // --audit
	AskTimeout   string   // --ask-timeout DURATION; empty keeps the file's, else 60s
	Approvals    string   // --approvals FILE: approved rules, read at start and written by always answers
	// Implied are rules the command implies rather than a flag of the
	// policy (sbx run --agent): Build puts them after every rule of the
	// user, so that the user's own rule for a host wins, and leaves them
	// out when a rule answers with a scripted LLM, whose hosts the mock
	// answers instead.
	Implied []netpolicy.Rule
}

// AddFlags registers the policy flags on fs. The repeatable flags take one
// value each (no comma splitting), so a file name may hold a comma.
func (f *policyFlags) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.Policy, "policy", "", "read rules and settings from the policy `FILE` (YAML or JSON); flags come first")
	fs.StringArrayVar(&f.Allow, "allow", nil, "allow requests to `PATTERN` (host, host:port, *.domain, IP, CIDR); repeatable")
	fs.StringArrayVar(&f.Block, "block", nil, "block requests to `PATTERN`; beats --allow; repeatable")
	fs.StringArrayVar(&f.Intercept, "intercept", nil, "intercept `PATTERN=FILE`: answer requests to PATTERN with status 200 and FILE's contents; beats --block and --allow; repeatable")
	fs.StringArrayVar(&f.Inspect, "inspect", nil, "decrypt and decide each HTTPS request to `PATTERN` (the sandbox trusts a per-sandbox CA); implied by --intercept and by rules with methods or path; repeatable")
	fs.StringVar(&f.Default, "default", "", "`allow|block|ask` requests no rule matches; ask holds them until answered (sbx approve) or --ask-timeout (default: the policy file's, else block)")
	fs.StringVar(&f.AskTimeout, "ask-timeout", "", "hold a request whose verdict is ask at most `DURATION` (1s to 1h) for an answer, then block it (default: the policy file's ask_timeout, else 60s)")
	fs.StringVar(&f.Approvals, "approvals", "", "read approved rules from the YAML policy `FILE` (before the first ask rule), and write the rules of always answers (sbx approve --always) to it (default: the --policy file when it is YAML)")
	fs.BoolVar(&f.Audit, "audit", false, "audit mode: log block verdicts but let the traffic through")
	fs.StringArrayVar(&f.AllowPrivate, "allow-private", nil, "exempt the network `CIDR` from the address guard; replaces the policy file's allow_private; repeatable")
}

// Build makes the policy the flags describe: the --policy file's rules
// after the inspect-only rules of --inspect and the rules of --intercept,
// --block and --allow (docs/policy.md, netpolicy.FlagPatterns), and
// --default, --audit, --ask-timeout and --allow-private in place of the
// file's settings.
//
// A bad flag value is a usage error (exit 2) that names the flag. An invalid
// policy file is exit 1, its problems printed one per line as
// "FILE:LINE: message"; so is a file that cannot be read.
func (f *policyFlags) Build() (*netpolicy.Policy, error) {
	return f.buildOn(func() (netpolicy.Spec, string, error) {
		if f.Policy == "" {
			return netpolicy.Spec{}, "", nil
		}
		spec, err := netpolicy.DecodeFile(f.Policy)
		if err != nil {
			return spec, "", policyFileError(err)
		}
		return spec, f.Policy, nil
	})
}

// Check checks the flags' values, reading no file: what Build would
// refuse as a usage error (exit 2). Commands call it before anything else,
// so that a bad flag is reported first.
func (f *policyFlags) Check() error {
	var intercepts []netpolicy.InterceptFlag
	for _, v := range f.Intercept {
		pattern, _, err := splitIntercept(v)
		if err != nil {
			return err
		}
		intercepts = append(intercepts, netpolicy.InterceptFlag{Pattern: pattern, Response: netpolicy.Response{Status: 200}})
	}
	_, _, err := f.flagParts(intercepts)
	return err
}

// flagParts checks the flags and returns their rules, --intercept's
// answering with intercepts, and --allow-private's networks. Every error
// is a usage error that names its flag.
func (f *policyFlags) flagParts(intercepts []netpolicy.InterceptFlag) ([]netpolicy.Rule, []netip.Prefix, error) {
	flagRules, err := netpolicy.FlagPatterns{Inspect: f.Inspect, Intercept: intercepts, Block: f.Block, Allow: f.Allow}.Rules()
	if err != nil {
		return nil, nil, &exitError{code: exitUsage, err: fmt.Errorf("%w\n%s", err, patternHelp)}
	}
	switch netpolicy.Action(f.Default) {
	case "", netpolicy.Allow, netpolicy.Block, netpolicy.Ask:
	default:
		return nil, nil, &exitError{code: exitUsage, err: fmt.Errorf("--default %q: want allow, block or ask, e.g. --default block", f.Default)}
	}
	if f.AskTimeout != "" {
		if _, err := netpolicy.ParseAskTimeout(f.AskTimeout); err != nil {
			return nil, nil, &exitError{code: exitUsage, err: fmt.Errorf("--ask-timeout %q: want a duration from 1s to 1h, e.g. --ask-timeout 2m", f.AskTimeout)}
		}
	}
	var allowPrivate []netip.Prefix
	for _, v := range f.AllowPrivate {
		pfx, err := parseAllowPrivate(v)
		if err != nil {
			return nil, nil, &exitError{code: exitUsage, err: err}
		}
		allowPrivate = append(allowPrivate, pfx)
	}
	return flagRules, allowPrivate, nil
}

// buildOn makes the policy of the flags over the one base returns, with
// its source for errors ("" for none). The flags are checked first.
func (f *policyFlags) buildOn(base func() (spec netpolicy.Spec, source string, err error)) (*netpolicy.Policy, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	var intercepts []netpolicy.InterceptFlag
	for _, v := range f.Intercept {
		ic, err := interceptFlag(v)
		if err != nil {
			return nil, err
		}
		intercepts = append(intercepts, ic)
	}
	flagRules, allowPrivate, err := f.flagParts(intercepts)
	if err != nil {
		return nil, err
	}

	spec, source, err := base()
	if err != nil {
		return nil, err
	}
	spec.Rules = append(flagRules, spec.Rules...)
	if f.Approvals != "" {
		approved, err := netpolicy.DecodeFile(f.Approvals)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Made by the first always answer.
		case err != nil:
			return nil, policyFileError(err)
		default:
			at := len(spec.Rules)
			if i := slices.IndexFunc(spec.Rules, func(r netpolicy.Rule) bool { return r.Action == netpolicy.Ask }); i >= 0 {
				at = i
			}
			spec.Rules = slices.Insert(spec.Rules, at, approved.Rules...)
		}
	}
	if !slices.ContainsFunc(spec.Rules, func(r netpolicy.Rule) bool { return r.Response != nil && r.Response.LLM != "" }) {
		spec.Rules = append(spec.Rules, f.Implied...)
	}
	if f.Default != "" {
		spec.Default = netpolicy.Action(f.Default)
	}
	if f.Audit {
		spec.Mode = netpolicy.Audit
	}
	if f.AskTimeout != "" {
		v, _ := netpolicy.ParseAskTimeout(f.AskTimeout) // flagParts checked it
		spec.AskTimeout = netpolicy.Duration(v)
	}
	if len(allowPrivate) > 0 {
		spec.AllowPrivate = allowPrivate
	}
	p, err := netpolicy.Compile(spec)
	if err != nil {
		// Decode and FlagRules have checked every part; say where it came
		// from all the same.
		if source != "" {
			err = fmt.Errorf("policy from flags and %s: %w", source, err)
		}
		return nil, &exitError{code: exitFailure, err: err}
	}
	return p, nil
}

// interceptFlag parses an --intercept PATTERN=FILE value and reads FILE as
// the response body. The Content-Type comes from FILE's extension, else it
// is text/plain.
func interceptFlag(v string) (netpolicy.InterceptFlag, error) {
	pattern, file, err := splitIntercept(v)
	if err != nil {
		return netpolicy.InterceptFlag{}, err
	}
	body, err := os.ReadFile(file)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return netpolicy.InterceptFlag{}, &exitError{code: exitFailure, err: fmt.Errorf(
			"--intercept %s: reading the response body from %s: %w", v, file, err)}
	}
	ctype := mime.TypeByExtension(filepath.Ext(file))
	if ctype == "" {
		ctype = "text/plain; charset=utf-8"
	}
	return netpolicy.InterceptFlag{
		Pattern: pattern,
		Response: netpolicy.Response{
			Status:  200,
			Headers: map[string]string{"Content-Type": ctype},
			Body:    string(body),
		},
	}, nil
}

// splitIntercept splits an --intercept PATTERN=FILE value; a value of
// another form is a usage error.
func splitIntercept(v string) (pattern, file string, err error) {
	pattern, file, ok := strings.Cut(v, "=")
	if !ok || pattern == "" || file == "" {
		return "", "", &exitError{code: exitUsage, err: fmt.Errorf(
			"--intercept %q: want PATTERN=FILE, e.g. --intercept telemetry.example.com=empty.json", v)}
	}
	return pattern, file, nil
}

// parseAllowPrivate parses an --allow-private value: a CIDR naming a
// network, not one of its addresses.
func parseAllowPrivate(v string) (netip.Prefix, error) {
	pfx, err := netip.ParsePrefix(v)
	if err != nil {
		if ip, ierr := netip.ParseAddr(v); ierr == nil {
			return netip.Prefix{}, fmt.Errorf("--allow-private %q is an address, not a CIDR; write --allow-private %s", v, netip.PrefixFrom(ip, ip.BitLen()))
		}
		return netip.Prefix{}, fmt.Errorf("--allow-private %q is not a CIDR; write e.g. --allow-private 10.0.0.0/8 or --allow-private fd00::/8", v)
	}
	if m := pfx.Masked(); m != pfx {
		return netip.Prefix{}, fmt.Errorf("--allow-private %s has host bits set; did you mean --allow-private %s?", pfx, m)
	}
	return pfx, nil
}

// policyFileError is the exit-1 error for a policy file that cannot be
// used: an invalid one prints netpolicy's "FILE:LINE: message" lines as
// they are; one that cannot be read says so.
func policyFileError(err error) error {
	var list netpolicy.ErrorList
	if errors.As(err, &list) {
		return &exitError{code: exitFailure, err: list, plain: true}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &exitError{code: exitFailure, err: fmt.Errorf("policy file %s: %w", pe.Path, pe.Err)}
	}
	return &exitError{code: exitFailure, err: err}
}

// approvalsFile is the file always answers write their rules to: the
// --approvals file, else a YAML --policy file, as an absolute path; ""
// when there is neither.
func (f *policyFlags) approvalsFile() string {
	file := f.Approvals
	if file == "" {
		if f.Policy == "" || strings.HasSuffix(f.Policy, ".json") {
			return ""
		}
		if data, err := os.ReadFile(f.Policy); err != nil || strings.HasPrefix(strings.TrimSpace(string(data)), "{") {
			return ""
		}
		file = f.Policy
	}
	if abs, err := filepath.Abs(file); err == nil {
		file = abs
	}
	return file
}
