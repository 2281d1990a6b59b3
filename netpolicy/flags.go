package netpolicy

import "fmt"

// InterceptFlag is an --intercept flag: a pattern and the response to give.
type InterceptFlag struct {
	Pattern  string
	Response Response
}

// FlagRules turns the command-line policy flags into rules, in the order of
// DESIGN.md §3: every intercept, then every block, then every allow, so that
// block beats allow and intercept beats both. Patterns take the flag forms
// of ParseFlagPattern. Rules get no ids; Compile assigns them. Every
// pattern is checked; the error names each bad one and wraps
// ErrInvalidRule.
func FlagRules(intercepts []InterceptFlag, blocks, allows []string) ([]Rule, error) {
	var rules []Rule
	var errs ErrorList
	add := func(flag, pattern string, action Action, resp *Response) {
		host, ports, err := ParseFlagPattern(pattern)
		if err != nil {
			errs = append(errs, &ParseError{Msg: fmt.Sprintf("--%s %s: %v", flag, pattern, err), Err: ErrInvalidRule})
			return
		}
		r := Rule{Host: host, Ports: ports, Action: action, Response: resp}
		check := r.clone()
		if _, ferrs := checkRule(&check); len(ferrs) > 0 {
			for _, fe := range ferrs {
				errs = append(errs, &ParseError{Msg: fmt.Sprintf("--%s %s: %s", flag, pattern, fe.msg), Err: ErrInvalidRule})
			}
			return
		}
		rules = append(rules, r)
	}
	for _, ic := range intercepts {
		resp := ic.Response
		add("intercept", ic.Pattern, Intercept, &resp)
	}
	for _, p := range blocks {
		add("block", p, Block, nil)
	}
	for _, p := range allows {
		add("allow", p, Allow, nil)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return rules, nil
}
