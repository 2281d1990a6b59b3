package netpolicy

import (
	"fmt"
	"maps"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Policy is a compiled, immutable policy: safe for concurrent use by any
// number of goroutines. Make one with Compile, Parse or ParseFile.
type Policy struct {
	spec  Spec // normalized, ids assigned; never modified
	rules []compiledRule
	// index holds the rules that decide: every rule but the inspect-only
	// ones, which Decide and its kin skip as if they were absent.
	index index
	// inspect holds the rules that mark their hosts for inspection, for
	// Inspects; hasInspect is set when there is one.
	inspect    index
	hasInspect bool
	// defaultDecision is returned when no rule matches.
	defaultDecision Decision
	// hostDefault is DecideHost's decision when no rule decides every
	// port of a host: the default, worded for a host rather than one
	// target.
	hostDefault Decision
	// hasPathRules is set when a rule has a path, so Decide resolves dot
	// segments only when it matters.
	hasPathRules bool
	// tunnelDefault is DecideTunnel's decision when no rule decides a
	// port of a host under the default block.
	tunnelDefault Decision
}

// compiledRule is a checked rule with what Decide needs precomputed.
type compiledRule struct {
	pat      pattern
	anyPort  bool
	ports    []uint16
	methods  []string
	path     string
	httpOnly bool // methods or path set: see matchesRest for CONNECT
	// inspectOnly marks a rule with inspect: true and no action, which
	// decides nothing and is left out of the deciding index.
	inspectOnly bool
	// inspect is set when the rule marks its hosts for inspection:
	// inspect: true, methods, a path, or action intercept.
	inspect  bool
	decision Decision
	// tunnelDecision is the decision for a CONNECT that an httpOnly
	// block or intercept rule stops.
	tunnelDecision Decision
	// hostDecision is DecideHost's decision when this allow or intercept
	// rule is the first that could let a host through.
	hostDecision Decision
}

// fieldError is a problem with one field of a rule or of the policy. Decode
// turns it into a ParseError with the field's line; Compile names the rule.
type fieldError struct {
	field string // "host", "ports", ...; empty for the rule as a whole
	msg   string
}

// Compile checks spec and builds a Policy from it. Rules without an id get
// the first free one of r1, r2, .... It does not modify spec.
//
// Every problem is reported, not only the first: the error is an ErrorList
// whose entries wrap ErrInvalidPolicy or ErrInvalidRule.
func Compile(spec Spec) (*Policy, error) {
	spec = spec.clone()
	var errs ErrorList
	top := func(field, msg string) {
		errs = append(errs, &ParseError{Msg: field + ": " + msg, Err: ErrInvalidPolicy})
	}
	for _, fe := range checkSpecFields(&spec) {
		top(fe.field, fe.msg)
	}
	seen := make(map[string]int, len(spec.Rules))
	for i := range spec.Rules {
		r := &spec.Rules[i]
		if r.ID == "" {
			continue
		}
		if first, dup := seen[r.ID]; dup {
			errs = append(errs, &ParseError{Msg: fmt.Sprintf("rule %d: id %q is already used by rule %d; ids must be unique", i+1, r.ID, first+1), Err: ErrInvalidRule})
			continue
		}
		seen[r.ID] = i
	}
	p := &Policy{rules: make([]compiledRule, len(spec.Rules))}
	for i := range spec.Rules {
		cr, ferrs := checkRule(&spec.Rules[i])
		for _, fe := range ferrs {
			errs = append(errs, &ParseError{Msg: ruleMsg(i, spec.Rules[i].ID, fe), Err: ErrInvalidRule})
		}
		p.rules[i] = cr
	}
	if len(errs) > 0 {
		return nil, errs
	}
	assignIDs(spec.Rules)
	p.spec = spec
	p.defaultDecision = Decision{
		Action: spec.Default,
		Rule:   RuleDefault,
		Reason: "no rule matched; the default is " + string(spec.Default),
	}
	p.hostDefault = Decision{Action: spec.Default, Rule: RuleDefault}
	switch spec.Default {
	case Allow:
		p.hostDefault.Reason = "no rule blocks it on every port; the default is allow"
	case Ask:
		// A name whose connections are asked about must resolve, so that
		// the question happens on the connection.
		p.hostDefault.Action = Allow
		p.hostDefault.Reason = "no rule blocks it on every port; the default is ask, so its connections are asked about"
	default:
		p.hostDefault.Reason = "no rule allows it on any port; the default is block"
	}
	p.tunnelDefault = Decision{Action: Block, Rule: RuleDefault, Reason: "no rule allows a request to it on this port; the default is block"}
	for i := range p.rules {
		cr := &p.rules[i]
		r := &spec.Rules[i]
		if cr.inspect {
			p.hasInspect = true
		}
		if cr.inspectOnly {
			continue // it decides nothing
		}
		cr.decision = Decision{
			Action:   r.Action,
			Rule:     r.ID,
			Reason:   fmt.Sprintf("rule %s: %s %s", r.ID, r.Action, r.Host),
			Response: r.Response,
		}
		cr.hostDecision = Decision{Action: Allow, Rule: r.ID, Reason: cr.decision.Reason}
		switch r.Action {
		case Intercept:
			cr.hostDecision.Reason += " (the gateway answers its requests, so the host is let through to it)"
		case Ask:
			cr.hostDecision.Reason += " (its connections are asked about, so the host is let through to them)"
		}
		if cr.httpOnly {
			cr.tunnelDecision = cr.decision
			cr.tunnelDecision.Reason += " (its methods and path cannot be checked inside a tunnel, which could carry any request)"
		}
		if cr.path != "" {
			p.hasPathRules = true
		}
	}
	p.index = buildIndex(p.rules, func(r *compiledRule) bool { return !r.inspectOnly })
	p.inspect = buildIndex(p.rules, func(r *compiledRule) bool { return r.inspect })
	return p, nil
}

// ruleMsg formats a rule's field error for a message without a line.
func ruleMsg(i int, id string, fe fieldError) string {
	loc := fmt.Sprintf("rule %d", i+1)
	if id != "" {
		loc += fmt.Sprintf(" (%s)", id)
	}
	if fe.field == "" {
		return loc + ": " + fe.msg
	}
	return loc + ": " + fe.field + ": " + fe.msg
}

// checkSpecFields checks and normalizes the policy's own fields.
func checkSpecFields(spec *Spec) []fieldError {
	var errs []fieldError
	switch spec.Version {
	case 0:
		spec.Version = FormatVersion
	case FormatVersion:
	default:
		errs = append(errs, fieldError{"version", fmt.Sprintf("version %d is not supported; write version: %d", spec.Version, FormatVersion)})
	}
	switch spec.Default {
	case "":
		spec.Default = Block
	case Allow, Block, Ask:
	default:
		errs = append(errs, fieldError{"default", fmt.Sprintf("%q is not a default action; write allow, block or ask", spec.Default)})
	}
	if spec.AskTimeout != 0 {
		if msg := checkAskTimeout(time.Duration(spec.AskTimeout)); msg != "" {
			errs = append(errs, fieldError{"ask_timeout", msg})
		}
	}
	switch spec.Mode {
	case "":
		spec.Mode = Enforce
	case Enforce, Audit:
	default:
		errs = append(errs, fieldError{"mode", fmt.Sprintf("%q is not a mode; write enforce or audit", spec.Mode)})
	}
	errs = append(errs, checkSecrets(spec.Secrets)...)
	for i, pfx := range spec.AllowPrivate {
		np, err := normalizePrefix(pfx)
		if err != nil {
			errs = append(errs, fieldError{"allow_private", err.Error()})
			continue
		}
		spec.AllowPrivate[i] = np
	}
	return errs
}

// normalizePrefix unmaps an IPv4-mapped prefix and insists on a network
// address, so that 10.0.0.1/8 is caught as the typo it likely is.
func normalizePrefix(pfx netip.Prefix) (netip.Prefix, error) {
	if !pfx.IsValid() {
		return pfx, fmt.Errorf("not a valid CIDR (want e.g. 10.0.0.0/8)")
	}
	if pfx.Addr().Zone() != "" {
		return pfx, fmt.Errorf("%s: IPv6 zones are not allowed", pfx)
	}
	if pfx.Addr().Is4In6() && pfx.Bits() >= 96 {
		pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
	}
	if m := pfx.Masked(); m != pfx {
		return pfx, fmt.Errorf("%s has host bits set; did you mean %s?", pfx, m)
	}
	return pfx, nil
}

// reservedIDs are the rule names a Decision uses for itself.
var reservedIDs = []string{RuleDefault, RuleInvalid, RuleGuard}

// checkRule checks one rule, normalizes it in place and compiles it.
func checkRule(r *Rule) (compiledRule, []fieldError) {
	var errs []fieldError
	bad := func(field, format string, args ...any) {
		errs = append(errs, fieldError{field, fmt.Sprintf(format, args...)})
	}
	var cr compiledRule

	if r.ID != "" {
		if err := checkID(r.ID); err != "" {
			bad("id", "%s", err)
		}
	}

	switch r.Action {
	case Allow, Block, Intercept, Ask:
	case "":
		if !r.Inspect {
			bad("action", "missing; write action: allow, block, intercept or ask (or inspect: true alone, for a rule that only marks hosts for inspection)")
		}
		cr.inspectOnly = r.Inspect
	default:
		bad("action", "%q is not an action; write allow, block, intercept or ask", r.Action)
	}

	pat, err := parsePattern(r.Host)
	if err != nil {
		bad("host", "%q: %s", r.Host, err)
	} else {
		cr.pat = pat
		r.Host = pat.String()
	}

	explicitPorts := r.Ports != nil
	if !explicitPorts {
		r.Ports = slices.Clone(DefaultPorts)
	}
	switch {
	case len(r.Ports) == 0:
		bad("ports", "empty list; omit ports for the default [80, 443], or write [\"*\"] for any port")
	case slices.Contains(r.Ports, AnyPort):
		if len(r.Ports) > 1 {
			bad("ports", "\"*\" already means every port; write it alone")
		}
		cr.anyPort = true
	default:
		for i, p := range r.Ports {
			if slices.Contains(r.Ports[:i], p) {
				bad("ports", "port %d is listed twice", p)
			}
			cr.ports = append(cr.ports, uint16(p))
		}
	}
	if err == nil && pat.kind == patAny && r.Action != Block && !explicitPorts {
		what := "with action " + string(r.Action)
		if cr.inspectOnly {
			what = "as an inspect-only rule"
		}
		bad("host", "\"*\" matches every host, so %s it needs an explicit port list (ports: [443], or *:443 on the command line)", what)
	}

	for i, m := range r.Methods {
		up := strings.ToUpper(m)
		switch {
		case len(m) > MaxMethodLen:
			bad("methods", "%q is longer than %d bytes, more than any HTTP method", truncate(m, 40), MaxMethodLen)
		case !IsToken(m):
			bad("methods", "%q is not an HTTP method", m)
		case up == "CONNECT":
			bad("methods", "CONNECT cannot be listed: rules with methods apply to HTTP requests (plain, or inside an inspected tunnel), not to tunnels; omit methods to match tunnels")
		}
		r.Methods[i] = up
	}
	if r.Methods != nil && len(r.Methods) == 0 {
		r.Methods = nil
	}
	cr.methods = r.Methods

	if r.Path != "" {
		var problem string
		if r.Path, problem = checkPathPrefix(r.Path); problem != "" {
			bad("path", "%s", problem)
		}
		cr.path = r.Path
	}
	if r.Action == Ask {
		// A question is about a host and port: its answer becomes a rule
		// for them, which methods and a path would not fit.
		if len(r.Methods) > 0 {
			bad("methods", "an ask rule asks about a host and port, not single requests; remove methods (an earlier allow or block rule with methods decides those requests)")
		}
		if r.Path != "" {
			bad("path", "an ask rule asks about a host and port, not single requests; remove path (an earlier allow or block rule with a path decides those requests)")
		}
	}
	cr.httpOnly = len(r.Methods) > 0 || r.Path != ""
	cr.inspect = r.Inspect || cr.httpOnly || r.Action == Intercept

	if cr.inspectOnly {
		const only = "an inspect-only rule (inspect: true, no action) decides nothing"
		if len(r.Methods) > 0 {
			bad("methods", "%s, so it takes no methods; add an action to decide these requests, or remove methods", only)
		}
		if r.Path != "" {
			bad("path", "%s, so it takes no path; add an action to decide these requests, or remove path", only)
		}
		if r.Response != nil {
			bad("response", "%s, so it has no response; write action: intercept to answer requests, or remove response", only)
		}
	}

	switch {
	case r.Response != nil && r.Action != Intercept && r.Action != "":
		bad("response", "only intercept rules have a response; remove it or write action: intercept")
	case r.Action == Intercept && r.Response == nil:
		bad("response", "an intercept rule needs a response: status, headers and body, or llm: SCRIPT")
	case r.Response != nil && r.Response.LLM != "":
		resp := *r.Response
		if resp.Status != 0 || len(resp.Headers) > 0 || resp.Body != "" {
			bad("response", "an llm response is answered by its script, which chooses status, headers and body; remove status, headers and body, or remove llm")
		}
		if why := checkLLMName(resp.LLM); why != "" {
			bad("response", "llm: %s", why)
		}
		// One name per script: ./a.yaml and a.yaml are the same file.
		resp.LLM = path.Clean(resp.LLM)
		resp.Headers = nil
		r.Response = &resp
	case r.Response != nil:
		resp := *r.Response
		resp.Headers = maps.Clone(resp.Headers)
		if len(resp.Headers) == 0 {
			resp.Headers = nil // one form for "no headers", as JSON writes it
		}
		if resp.Status == 0 {
			resp.Status = 200
		}
		if resp.Status < 200 || resp.Status > 599 {
			bad("response", "status %d is not in 200..599", resp.Status)
		}
		for k, v := range resp.Headers {
			lk := strings.ToLower(k)
			switch {
			case !IsToken(k):
				bad("response", "header name %q is not valid", k)
			case strings.HasPrefix(lk, "x-sbx-"):
				bad("response", "header %q is reserved for the gateway", k)
			case lk == "content-length" || lk == "transfer-encoding" || lk == "connection":
				bad("response", "header %q is set by the gateway; remove it", k)
			case strings.ContainsAny(v, "\r\n\x00"):
				bad("response", "header %q holds a line break or NUL", k)
			}
		}
		r.Response = &resp
	}
	return cr, errs
}

// maxLLMName bounds the name of an LLM script in a response.
const maxLLMName = 1024

// checkLLMName returns why name cannot name an LLM script, or "".
func checkLLMName(name string) string {
	switch {
	case len(name) > maxLLMName:
		return fmt.Sprintf("the script's name is over %d bytes", maxLLMName)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, func(c rune) bool { return c < ' ' || c == 0x7f }):
		return fmt.Sprintf("%q holds a control character or is not UTF-8; give the script's path", name)
	}
	return ""
}

// LLMScripts returns the names of the LLM scripts the policy's intercept
// rules answer with (Response.LLM), sorted, each once; nil when there are
// none. A gateway must have each of them to run the policy.
func (p *Policy) LLMScripts() []string {
	var names []string
	for _, r := range p.spec.Rules {
		if r.Response != nil && r.Response.LLM != "" && !slices.Contains(names, r.Response.LLM) {
			names = append(names, r.Response.LLM)
		}
	}
	slices.Sort(names)
	return names
}

// checkID returns why id cannot name a rule, or "".
func checkID(id string) string {
	if slices.Contains(reservedIDs, id) {
		return fmt.Sprintf("%q is reserved; choose another id", id)
	}
	if len(id) > 64 {
		return "longer than 64 characters"
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Sprintf("%q: use letters, digits, '-', '_' and '.'", id)
		}
	}
	return ""
}

// assignIDs gives every rule without an id the first free one of r1, r2,
// ..., in order.
func assignIDs(rules []Rule) {
	used := make(map[string]bool, len(rules))
	for _, r := range rules {
		used[r.ID] = true
	}
	n := 1
	for i := range rules {
		if rules[i].ID != "" {
			continue
		}
		for used["r"+strconv.Itoa(n)] {
			n++
		}
		rules[i].ID = "r" + strconv.Itoa(n)
		used[rules[i].ID] = true
	}
}

// MaxMethodLen is the longest method sbx takes, in a rule or a request:
// longer than any method a server implements (the longest registered,
// UPDATEREDIRECTREF, has 17 bytes), and short enough that a method costs
// the decision log no more than a short path.
const MaxMethodLen = 32

// ValidMethod reports whether m is an HTTP method: a non-empty token
// (RFC 9110 §9.1, §5.6.2) of at most MaxMethodLen bytes.
func ValidMethod(m string) bool { return len(m) <= MaxMethodLen && IsToken(m) }

// IsToken reports whether s is a non-empty HTTP token (RFC 9110 §5.6.2),
// as methods, header names and transfer codings are. It takes bytes too,
// so that a parser need not make a string first.
func IsToken[T string | []byte](s T) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChars[s[i]] {
			return false
		}
	}
	return true
}

// tokenChars marks the bytes allowed in a token (RFC 9110 §5.6.2).
var tokenChars = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range []byte("!#$%&'*+-.^_`|~") {
		t[c] = true
	}
	return t
}()

// clone returns a deep copy of the spec.
func (s Spec) clone() Spec {
	c := s
	c.AllowPrivate = slices.Clone(s.AllowPrivate)
	c.Rules = make([]Rule, len(s.Rules))
	for i, r := range s.Rules {
		c.Rules[i] = r.clone()
	}
	if s.Secrets != nil {
		c.Secrets = make([]Secret, len(s.Secrets))
		for i, sec := range s.Secrets {
			c.Secrets[i] = sec.clone()
		}
	}
	return c
}

// clone returns a deep copy of the rule.
func (r Rule) clone() Rule {
	r.Ports = slices.Clone(r.Ports)
	r.Methods = slices.Clone(r.Methods)
	if r.Response != nil {
		resp := *r.Response
		resp.Headers = maps.Clone(resp.Headers)
		r.Response = &resp
	}
	return r
}

// Spec returns a deep copy of the policy as a document: normalized, with
// every rule's id and ports filled in. Compile(p.Spec()) gives an equal
// policy.
func (p *Policy) Spec() Spec { return p.spec.clone() }

// Mode returns Enforce or Audit.
func (p *Policy) Mode() Mode { return p.spec.Mode }

// Default returns the action taken when no rule matches.
func (p *Policy) Default() Action { return p.spec.Default }

// AskTimeout returns the policy's ask_timeout, or zero when it names none.
func (p *Policy) AskTimeout() time.Duration { return time.Duration(p.spec.AskTimeout) }

// FirstAsk returns the position of the policy's first ask rule, or -1
// when it has none: where the rule of an answer goes (before it, or last),
// so that every rule that decided before the question still does.
func (p *Policy) FirstAsk() int {
	return slices.IndexFunc(p.spec.Rules, func(r Rule) bool { return r.Action == Ask })
}

// Asks reports whether some target could be decided Ask: the default is
// ask or a rule's action is.
func (p *Policy) Asks() bool {
	if p.spec.Default == Ask {
		return true
	}
	return slices.ContainsFunc(p.spec.Rules, func(r Rule) bool { return r.Action == Ask })
}

// AllowPrivate returns the networks that allow_private exempts from the
// address guard.
func (p *Policy) AllowPrivate() []netip.Prefix { return slices.Clone(p.spec.AllowPrivate) }

// Rules returns a copy of the policy's rules, normalized, ids assigned.
func (p *Policy) Rules() []Rule { return p.Spec().Rules }
