package netpolicy

import (
	"errors"
	"fmt"
)

// InterceptFlag is an --intercept flag: a pattern and the response to give.
type InterceptFlag struct {
	Pattern  string
	Response Response
}

// FlagPatterns are the patterns of the command-line policy flags that make
// rules, each in the flag forms of ParseFlagPattern. The zero value makes
// no rules.
type FlagPatterns struct {
	Inspect   []string        // --inspect PATTERN: inspect-only rules
	Intercept []InterceptFlag // --intercept PATTERN=FILE
	Block     []string        // --block PATTERN
	Allow     []string        // --allow PATTERN
}

// Rules turns the patterns into rules. First come the inspect-only rules
// of Inspect: they decide nothing, so their place changes no decision, and
// putting them first keeps the deciding rules together after them and
// lists what is inspected at the top of the policy. Then the deciding
// rules, in the order of docs/policy.md: every intercept, then every block,
// then every allow, so that block beats allow and intercept beats both.
// Rules get no ids; Compile assigns them. Every pattern is checked; the
// error names each bad one with its flag and wraps ErrInvalidRule.
func (f FlagPatterns) Rules() ([]Rule, error) {
	var rules []Rule
	var errs ErrorList
	add := func(flag, pattern string, r Rule) {
		host, ports, err := ParseFlagPattern(pattern)
		if u := (*URLError)(nil); errors.As(err, &u) && u.Host != "" {
			errs = append(errs, &ParseError{Msg: fmt.Sprintf("--%s %s is a URL, not a pattern; write --%s %s", flag, pattern, flag, u.Pattern()), Err: ErrInvalidRule})
			return
		} else if err != nil {
			errs = append(errs, &ParseError{Msg: fmt.Sprintf("--%s %s: %v", flag, pattern, err), Err: ErrInvalidRule})
			return
		}
		r.Host, r.Ports = host, ports
		check := r.clone()
		if _, ferrs := checkRule(&check); len(ferrs) > 0 {
			for _, fe := range ferrs {
				errs = append(errs, &ParseError{Msg: fmt.Sprintf("--%s %s: %s", flag, pattern, fe.msg), Err: ErrInvalidRule})
			}
			return
		}
		rules = append(rules, r)
	}
	for _, p := range f.Inspect {
		add("inspect", p, Rule{Inspect: true})
	}
	for _, ic := range f.Intercept {
		resp := ic.Response
		add("intercept", ic.Pattern, Rule{Action: Intercept, Response: &resp})
	}
	for _, p := range f.Block {
		add("block", p, Rule{Action: Block})
	}
	for _, p := range f.Allow {
		add("allow", p, Rule{Action: Allow})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return rules, nil
}

// FlagRules is FlagPatterns{Intercept: intercepts, Block: blocks, Allow:
// allows}.Rules(): the rules of the deciding flags, without inspect-only
// ones.
func FlagRules(intercepts []InterceptFlag, blocks, allows []string) ([]Rule, error) {
	return FlagPatterns{Intercept: intercepts, Block: blocks, Allow: allows}.Rules()
}
