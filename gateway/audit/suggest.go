package audit

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// SuggestOptions are the options of Suggest.
type SuggestOptions struct {
	// Wildcards folds three or more sibling subdomains (a.x.example,
	// b.x.example, c.x.example) into one rule for *.x.example, never
	// wider than a registrable domain.
	Wildcards bool
}

// suggestedRule is one rule of a suggested policy, with what its comment
// says.
type suggestedRule struct {
	host      string
	ports     []int // nil: the default ports (a name seen only in DNS)
	methods   []string
	path      string
	intercept int // the status of an intercept rule, 0 for allow
	notes     []string
	blocked   bool // every attempt was blocked at run time
	bypass    bool // seen only as packets around the gateway
	denied    bool // a block rule: a person denied it when asked (see deniedTarget)
}

// Suggest returns a policy (YAML, version 1, default block) that allows
// exactly the targets the report saw, grouped by registrable domain, with
// counts in comments and hosts that can carry data out (paste sites,
// object stores, webhooks, link shorteners, gists) marked. A target seen
// only as plain HTTP requests gets the methods seen and the longest path
// prefix (to a '/') they share; a target also reached by a tunnel gets
// neither, since a rule with methods or a path never allows a tunnel.
// Targets every attempt at which was blocked at run time, and the
// destinations of bypass packets, come last, each under a comment saying
// so: they are allowed only because they were seen.
//
// The answers to the gateway's questions (approval records) are
// reproduced: a target a person allowed when asked is allowed, its
// comment naming who answered, how and when; a target a person denied,
// and that nothing else let through (deniedTarget), gets a block rule,
// listed first so that no wider rule allows it. Expect accepts the
// attempts a person denied when the policy blocks them (Expectation's
// Denied). A question no one answered (by timeout) is no one's decision:
// its target is one blocked at run time, with a note.
//
// The policy is checked before it is returned: it compiles, and every
// attempt in the report replays as allowed or intercepted (see Replay).
// The attempts it cannot cover (targets that did not parse, bypass
// packets whose destinations the gateway did not keep) are listed in its
// header.
func Suggest(rep *Report, opt SuggestOptions) ([]byte, error) {
	free := map[string]bool{} // hosts whose rules must not have methods or a path
	for range 2 {
		rules, skipped := suggestRules(rep, opt, free)
		out := renderPolicy(rep, rules, skipped)
		p, err := netpolicy.Parse("suggested policy", out)
		if err != nil {
			return nil, fmt.Errorf("the suggested policy does not compile (a bug in sbx audit): %w", err)
		}
		misses := coverage(p, rep)
		if len(misses) == 0 {
			return out, nil
		}
		for _, h := range misses {
			if free[h] {
				return nil, fmt.Errorf("the suggested policy does not allow %q, which the log has (a bug in sbx audit)", h)
			}
			free[h] = true
		}
	}
	return nil, fmt.Errorf("the suggested policy does not allow all the log has (a bug in sbx audit)")
}

// suggestRules builds the rules, and lists what no rule can allow.
func suggestRules(rep *Report, opt SuggestOptions, free map[string]bool) ([]*suggestedRule, []string) {
	var rules []*suggestedRule
	var skipped []string
	asked := answersByTarget(rep)
	byHost := map[string][]*Target{}
	var hosts []string
	for _, t := range rep.Targets {
		if !validTarget(t.Host, t.Port) {
			skipped = append(skipped, fmt.Sprintf("%s at %q port %d, which is not a valid target", plural(t.Total(), "attempt", "attempts"), t.Host, t.Port))
			continue
		}
		if byHost[t.Host] == nil {
			hosts = append(hosts, t.Host)
		}
		byHost[t.Host] = append(byHost[t.Host], t)
	}
	for _, h := range hosts {
		ts := byHost[h]
		// Ports that need an unrestricted rule, and the restricted ones
		// grouped by their methods and path.
		var open []int
		var openNotes []string
		blocked := true
		type restriction struct{ methods, path string }
		restricted := map[restriction]*suggestedRule{}
		var order []restriction
		for _, t := range ts {
			if t.Invalid > 0 {
				skipped = append(skipped, fmt.Sprintf("%s at %s that the gateway refused whatever the policy (rule invalid: a malformed request, a Host header or TLS server name that is not the target's; or rule secret: a secret's placeholder sent where the secret is not)", plural(t.Invalid, "attempt", "attempts"), hostPort(h, t.Port)))
			}
			if t.Fenced > 0 {
				skipped = append(skipped, fmt.Sprintf("%s at %s that the address guard refused for addresses no policy reaches (the gateway's own, this host's or the sandbox pool's), or that the log does not name", plural(t.Fenced, "attempt", "attempts"), hostPort(h, t.Port)))
			}
			if t.Capped > 0 {
				skipped = append(skipped, fmt.Sprintf("%s at %s that the per-client tunnel cap (%s) refused: the sandbox had as many tunnels open as it may, a limit of the gateway that no rule lifts", plural(t.Capped, "attempt", "attempts"), hostPort(h, t.Port), decisionlog.CapTunnels))
			}
			if onlyInvalid(t) {
				continue // a rule would allow what the log does not show
			}
			// An attempt the address guard refused was one a rule let
			// through; allow_private exempts its address.
			if t.Allowed+t.Intercepted+t.Guarded-t.Fenced > 0 {
				blocked = false
			}
			note := targetNote(t)
			ans := asked[answerKey(h, t.Port)]
			if deniedTarget(t, ans) {
				rules = append(rules, &suggestedRule{host: h, ports: []int{t.Port}, denied: true, blocked: true, notes: append([]string{note}, ans.notes()...)})
				continue
			}
			extra := ans.notes()
			// An intercept rule's status is 200..599 (netpolicy); with
			// any other the target is allowed instead, which --expect
			// accepts too.
			if t.MockLLM > 0 {
				// The agent's model API, answered by a script when
				// logged: a canned status would answer it with an empty
				// body, so it is allowed as what it stands for.
				note += fmt.Sprintf("; %s answered by a mock LLM when logged (to mock it again: --mock-llm, or an intercept rule with response: {llm: SCRIPT})", plural(t.MockLLM, "request", "requests"))
			}
			if t.Intercepted == t.Total() && t.MockLLM == 0 && t.InterceptStatus >= 200 && t.InterceptStatus <= 599 && t.Tunnels == 0 && !t.PathsCut {
				rules = append(rules, &suggestedRule{host: h, ports: []int{t.Port}, intercept: t.InterceptStatus,
					notes: append([]string{note, "intercepted when logged; the log keeps the status, not the headers or body"}, extra...)})
				continue
			}
			methods := slices.DeleteFunc(slices.Clone(t.Methods), isTunnel)
			if bad := slices.DeleteFunc(slices.Clone(methods), netpolicy.IsToken[string]); len(bad) > 0 {
				skipped = append(skipped, fmt.Sprintf("requests to %s with %q, which is not an HTTP method", hostPort(h, t.Port), bad))
				methods = slices.DeleteFunc(methods, func(m string) bool { return !netpolicy.IsToken(m) })
			}
			// Methods or paths that were not kept cannot be listed. A path the log cut short is replayed
			// as a tunnel (see Replay), which only a rule without
			// methods or path allows.
			if free[h] || t.Tunnels > 0 || len(methods) == 0 || t.MethodsIncomplete || t.PathsIncomplete || t.PathsCut || len(t.Paths) == 0 {
				open = append(open, t.Port)
				openNotes = append(append(openNotes, note), extra...)
				continue
			}
			k := restriction{strings.Join(methods, ","), pathPrefix(t.Paths)}
			r := restricted[k]
			if r == nil {
				r = &suggestedRule{host: h, methods: methods, path: k.path}
				restricted[k] = r
				order = append(order, k)
			}
			r.ports = append(r.ports, t.Port)
			r.notes = append(append(r.notes, note), extra...)
		}
		if len(open) > 0 {
			slices.Sort(open)
			rules = append(rules, &suggestedRule{host: h, ports: open, notes: openNotes, blocked: blocked})
		}
		for _, k := range order {
			r := restricted[k]
			r.blocked = blocked
			rules = append(rules, r)
		}
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		seen[h] = true
	}
	for _, d := range rep.DNSNames {
		if seen[d.Name] {
			continue
		}
		if !validTarget(d.Name, 443) {
			skipped = append(skipped, fmt.Sprintf("%s for %q, which is not a valid name", plural(d.Total(), "DNS query", "DNS queries"), d.Name))
			continue
		}
		seen[d.Name] = true
		rules = append(rules, &suggestedRule{host: d.Name, blocked: d.Allowed+d.Intercepted == 0,
			notes: []string{fmt.Sprintf("%s; seen only in DNS lookups, no connection followed", plural(d.Total(), "query", "queries"))}})
	}
	bypassPorts := map[string][]int{}
	bypassNotes := map[string][]string{}
	var bypassHosts []string
	for _, b := range rep.Bypass {
		if b.Host == "" {
			skipped = append(skipped, fmt.Sprintf("%s whose destinations the gateway did not keep apart", plural(b.Packets, "packet", "packets")))
			continue
		}
		if !validTarget(b.Host, 443) {
			skipped = append(skipped, fmt.Sprintf("%s to %q, which is not a valid address", plural(b.Packets, "packet", "packets"), b.Host))
			continue
		}
		if _, ok := bypassPorts[b.Host]; !ok {
			bypassHosts = append(bypassHosts, b.Host)
			bypassPorts[b.Host] = nil
		}
		p := b.Port
		if p == 0 {
			p = -1 // ICMP and the like: any port names the address
		}
		bypassPorts[b.Host] = append(bypassPorts[b.Host], p)
		bypassNotes[b.Host] = append(bypassNotes[b.Host], fmt.Sprintf("%s %s", plural(b.Packets, b.Proto+" packet", b.Proto+" packets"), portNote(b.Port)))
	}
	for _, h := range bypassHosts {
		ports := bypassPorts[h]
		if slices.Contains(ports, -1) {
			ports = []int{-1}
		}
		slices.Sort(ports)
		rules = append(rules, &suggestedRule{host: h, ports: slices.Compact(ports), bypass: true, notes: bypassNotes[h]})
	}
	if n := rep.Overflow.Targets; n > 0 {
		skipped = append(skipped, fmt.Sprintf("%s at targets beyond the first %d, which were not kept apart", plural(n, "attempt", "attempts"), len(rep.Targets)))
	}
	if n := rep.Overflow.DNSNames; n > 0 {
		skipped = append(skipped, fmt.Sprintf("%s for names beyond the first %d, which were not kept apart", plural(n, "DNS query", "DNS queries"), len(rep.DNSNames)))
	}
	if n := rep.Overflow.Bypass; n > 0 {
		skipped = append(skipped, fmt.Sprintf("%s around the gateway to destinations beyond the first %d, which were not kept apart", plural(n, "packet", "packets"), len(rep.Bypass)))
	}
	if len(rep.Unknown) > 0 {
		skipped = append(skipped, rep.unknownText()+"; upgrade sbx")
	}
	if rep.Dropped > 0 {
		skipped = append(skipped, fmt.Sprintf("%s the gateway left out of the log (over its log budget, or reports of refused packets it lost)", plural(rep.Dropped, "record", "records")))
	}
	if n := rep.Overflow.GuardAddrs; n > 0 {
		skipped = append(skipped, fmt.Sprintf("%s at addresses the address guard refused beyond the first %d, which were not kept apart", plural(n, "attempt", "attempts"), len(rep.GuardAddrs)))
	}
	skipped = append(skipped, rep.Gaps...)
	if opt.Wildcards {
		rules = foldWildcards(rules)
	}
	return rules, skipped
}

// onlyInvalid reports whether the gateway refused every attempt at t
// whatever the policy: invalid, refused by the address guard for no
// address a policy can exempt, or by a per-client cap.
func onlyInvalid(t *Target) bool { return satAdd(satAdd(t.Invalid, t.Fenced), t.Capped) >= t.Total() }

// targetNote is a rule's comment for t: counts, bytes and process names.
func targetNote(t *Target) string {
	var b strings.Builder
	fmt.Fprintf(&b, "port %d: %s", t.Port, plural(t.Total(), "attempt", "attempts"))
	if len(t.Methods) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(t.Methods, ", "))
	}
	if t.Blocked > 0 {
		fmt.Fprintf(&b, ", %d blocked when logged", t.Blocked)
		switch {
		case t.Guarded > 0 && t.Capped > 0:
			fmt.Fprintf(&b, " (%d by the address guard, %d by the tunnel cap)", t.Guarded, t.Capped)
		case t.Guarded > 0:
			fmt.Fprintf(&b, " (%d by the address guard)", t.Guarded)
		case t.Capped > 0:
			fmt.Fprintf(&b, " (%d by the tunnel cap)", t.Capped)
		}
	}
	if t.BytesOut+t.BytesIn > 0 {
		fmt.Fprintf(&b, ", %s out, %s in", byteSize(t.BytesOut), byteSize(t.BytesIn))
	}
	if len(t.Processes) > 0 {
		fmt.Fprintf(&b, ", by %s", strings.Join(t.Processes, ", "))
	}
	return b.String()
}

func portNote(p int) string {
	if p == 0 {
		return ""
	}
	return "to port " + strconv.Itoa(p)
}

// pathPrefix returns the longest prefix the canonical forms of paths
// share, cut after its last '/', or the one path when they are all the
// same; cut again before the first segment that holds a character a path
// rule refuses (see badInRulePath); "" when that leaves "/", which
// restricts nothing.
func pathPrefix(paths []PathCount) string {
	prefix := netpolicy.CanonicalPath(paths[0].Path)
	same := true
	for _, p := range paths[1:] {
		c := netpolicy.CanonicalPath(p.Path)
		if c != prefix {
			same = false
		}
		n := 0
		for n < len(prefix) && n < len(c) && prefix[n] == c[n] {
			n++
		}
		prefix = prefix[:n]
	}
	if !same {
		prefix = prefix[:strings.LastIndexByte(prefix, '/')+1]
	}
	if !strings.HasPrefix(prefix, "/") {
		return ""
	}
	if i := strings.IndexFunc(prefix, badInRulePath); i >= 0 {
		prefix = prefix[:strings.LastIndexByte(prefix[:i], '/')+1]
	}
	if prefix == "/" {
		return ""
	}
	return prefix
}

// badInRulePath reports whether a path rule refuses c (netpolicy's
// checkRule): '?' and '#' (a query or fragment), ';' (path parameters,
// which servers read differently), a space or control character, DEL,
// and, since a canonical path escapes them, anything else not printable
// ASCII.
func badInRulePath(c rune) bool {
	return c == '?' || c == '#' || c == ';' || c <= ' ' || c >= 0x7f
}

// foldWildcards replaces three or more rules for sibling names with one
// rule for *.parent, where parent is the registrable domain or below it.
// Only plain allow rules fold; the wildcard's ports are all of theirs.
func foldWildcards(rules []*suggestedRule) []*suggestedRule {
	children := map[string][]*suggestedRule{}
	var parents []string
	for _, r := range rules {
		if r.intercept != 0 || r.methods != nil || r.bypass || r.denied || r.ports == nil || isIP(r.host) {
			continue
		}
		dot := strings.IndexByte(r.host, '.')
		if dot < 0 {
			continue
		}
		parent := r.host[dot+1:]
		etld1, err := publicsuffix.EffectiveTLDPlusOne(r.host)
		if err != nil || (parent != etld1 && !strings.HasSuffix(parent, "."+etld1)) {
			continue // *.parent would be wider than a registrable domain
		}
		if children[parent] == nil {
			parents = append(parents, parent)
		}
		children[parent] = append(children[parent], r)
	}
	folded := map[*suggestedRule]*suggestedRule{}
	for _, parent := range parents {
		kids := children[parent]
		names := map[string]bool{}
		for _, k := range kids {
			names[k.host] = true
		}
		if len(names) < 3 {
			continue
		}
		w := &suggestedRule{host: "*." + parent}
		for _, k := range kids {
			w.ports = append(w.ports, k.ports...)
			w.notes = append(w.notes, k.host+" "+strings.Join(k.notes, "; "))
			folded[k] = w
		}
		w.blocked = !slices.ContainsFunc(kids, func(k *suggestedRule) bool { return !k.blocked })
		slices.Sort(w.ports)
		w.ports = slices.Compact(w.ports)
	}
	var out []*suggestedRule
	placed := map[*suggestedRule]bool{}
	for _, r := range rules {
		if w := folded[r]; w != nil {
			if !placed[w] {
				placed[w] = true
				out = append(out, w)
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

func isIP(h string) bool {
	_, err := netip.ParseAddr(h)
	return err == nil
}

// group is the registrable domain a rule is listed under.
func group(host string) string {
	h := strings.TrimPrefix(host, "*.")
	if isIP(h) {
		return "addresses"
	}
	if d, err := publicsuffix.EffectiveTLDPlusOne(h); err == nil {
		return d
	}
	return h
}

// renderPolicy writes the rules as a policy file.
func renderPolicy(rep *Report, rules []*suggestedRule, skipped []string) []byte {
	var b bytes.Buffer
	b.WriteString("# A policy that allows what these decision logs saw, from sbx audit --suggest.\n")
	fmt.Fprintf(&b, "# Logs: %s\n", visible(strings.Join(rep.Logs, ", ")))
	if !rep.First.IsZero() {
		fmt.Fprintf(&b, "# From %s to %s, %s.\n", rep.First.Format("2006-01-02 15:04:05Z07:00"), rep.Last.Format("2006-01-02 15:04:05Z07:00"), plural(rep.Records, "record", "records"))
	}
	b.WriteString("# Review it before you use it: every rule allows something the code tried,\n")
	b.WriteString("# including what was blocked when the log was written (listed last).\n")
	b.WriteString("# Lines marked CAN CARRY DATA OUT name hosts that accept uploads from anyone.\n")
	if len(skipped) > 0 {
		b.WriteString("#\n# Not covered, since no rule can allow it:\n")
		for _, s := range skipped {
			fmt.Fprintf(&b, "#   %s\n", visible(s))
		}
	}
	b.WriteString("version: 1\ndefault: block\n")
	if len(rep.GuardAddrs) > 0 {
		b.WriteString("# The address guard refused these private or reserved addresses, which the\n")
		b.WriteString("# names below resolved to when logged. Keep only those you mean to reach\n")
		b.WriteString("# (a registry mirror, a lab network): a name that resolves to an address\n")
		b.WriteString("# listed here reaches it.\n")
		b.WriteString("allow_private:\n")
		for _, g := range rep.GuardAddrs {
			ip := netip.MustParseAddr(g.Addr)
			fmt.Fprintf(&b, "  # %s, for %s (%s)\n", visible(g.Class), visible(g.Host), plural(g.Attempts, "attempt", "attempts"))
			fmt.Fprintf(&b, "  - %s\n", quote(netip.PrefixFrom(ip, ip.BitLen()).String()))
		}
	}
	b.WriteString("rules:\n")
	sections := []struct {
		title string
		pick  func(*suggestedRule) bool
	}{
		{"Denied when asked: a person answered deny to the gateway's question, and nothing else\n  # let them through. Block rules, first so that no rule below allows them; sbx audit\n  # --expect accepts the attempts a person denied when the policy blocks them.", func(r *suggestedRule) bool { return r.denied }},
		{"", func(r *suggestedRule) bool { return !r.blocked && !r.bypass && !r.denied }},
		{"Blocked when the log was written; allowed here only because the code tried them.\n  # Delete what you do not want, and sbx audit --expect will list it.", func(r *suggestedRule) bool { return r.blocked && !r.bypass && !r.denied }},
		{"Destinations of packets sent around the gateway (UDP, ICMP, ...), which sbx refuses\n  # whatever the policy says. A rule here lets sbx audit --expect accept those packets, and\n  # lets TCP to the address through: delete it if you want neither.", func(r *suggestedRule) bool { return r.bypass }},
	}
	for _, sec := range sections {
		var rs []*suggestedRule
		for _, r := range rules {
			if sec.pick(r) {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		if sec.title != "" {
			fmt.Fprintf(&b, "\n  # %s\n", sec.title)
		}
		slices.SortStableFunc(rs, func(a, c *suggestedRule) int {
			return cmp.Or(strings.Compare(group(a.host), group(c.host)), strings.Compare(strings.TrimPrefix(a.host, "*."), strings.TrimPrefix(c.host, "*.")))
		})
		last := ""
		for _, r := range rs {
			if g := group(r.host); g != last {
				fmt.Fprintf(&b, "\n  # %s\n", visible(g))
				last = g
			}
			if why := exfilClass(r.host); why != "" {
				fmt.Fprintf(&b, "  # CAN CARRY DATA OUT: %s\n", why)
			}
			for _, n := range r.notes {
				fmt.Fprintf(&b, "  # %s\n", visible(n))
			}
			fmt.Fprintf(&b, "  - host: %s\n", quote(r.host))
			if r.ports != nil {
				ps := make([]string, len(r.ports))
				for i, p := range r.ports {
					if p < 0 {
						ps[i] = `"*"`
					} else {
						ps[i] = strconv.Itoa(p)
					}
				}
				fmt.Fprintf(&b, "    ports: [%s]\n", strings.Join(ps, ", "))
			}
			if len(r.methods) > 0 {
				qs := make([]string, len(r.methods))
				for i, m := range r.methods {
					qs[i] = quote(m)
				}
				fmt.Fprintf(&b, "    methods: [%s]\n", strings.Join(qs, ", "))
			}
			if r.path != "" {
				fmt.Fprintf(&b, "    path: %s\n", quote(r.path))
			}
			switch {
			case r.denied:
				b.WriteString("    action: block\n")
			case r.intercept != 0:
				fmt.Fprintf(&b, "    action: intercept\n    response:\n      status: %d\n", r.intercept)
			default:
				b.WriteString("    action: allow\n")
			}
		}
	}
	if len(rules) == 0 {
		b.WriteString("  []\n")
	}
	return b.Bytes()
}

// quote writes s as a double-quoted scalar; a JSON string is one in YAML.
func quote(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// coverage replays every attempt of the report against p and returns the
// hosts of those p does not allow, and the addresses the address guard
// refused that p does not exempt.
func coverage(p *netpolicy.Policy, rep *Report) []string {
	var misses []string
	asked := answersByTarget(rep)
	denied := deniedHosts(rep, asked)
	miss := func(r *decisionlog.Record) {
		if d, _ := Replay(p, r); d.Action == netpolicy.Block && !slices.Contains(misses, r.Host) {
			misses = append(misses, r.Host)
		}
	}
	for _, t := range rep.Targets {
		if !validTarget(t.Host, t.Port) || onlyInvalid(t) {
			continue // listed as not covered
		}
		if deniedTarget(t, asked[answerKey(t.Host, t.Port)]) {
			continue // a block rule: Expect accepts what a person denied
		}
		r := decisionlog.Record{Event: decisionlog.EventDecision, Kind: decisionlog.KindConnect, Host: t.Host, Port: t.Port, Method: "CONNECT"}
		if t.Tunnels > 0 {
			miss(&r)
		}
		if t.InspectedTunnels > 0 {
			r.Action, r.Reason = "allow", netpolicy.InspectedReason
			miss(&r)
		}
		r.Kind = decisionlog.KindHTTP
		for _, m := range t.Methods {
			if isTunnel(m) || !netpolicy.IsToken(m) {
				continue // a method that is not one is listed as not covered
			}
			r.Method = m
			for _, pc := range t.Paths {
				r.Path = pc.Path
				miss(&r)
			}
		}
	}
	for _, d := range rep.DNSNames {
		if validTarget(d.Name, 443) && !denied[d.Name] {
			miss(&decisionlog.Record{Event: decisionlog.EventDecision, Kind: decisionlog.KindDNS, Host: d.Name})
		}
	}
	for _, b := range rep.Bypass {
		if b.Host != "" && validTarget(b.Host, 443) {
			miss(&decisionlog.Record{Event: decisionlog.EventDecision, Kind: decisionlog.KindBypass, Host: b.Host, Port: b.Port, Proto: b.Proto})
		}
	}
	for _, g := range rep.GuardAddrs {
		ip := netip.MustParseAddr(g.Addr)
		if _, refused := p.GuardAddr(ip, netpolicy.Target{Host: g.Addr, Port: 443, Method: "CONNECT"}); refused && !slices.Contains(misses, g.Addr) {
			misses = append(misses, g.Addr)
		}
	}
	return misses
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatUint(n, 10) + " " + many
}

// byteSize writes n bytes for people: 512 B, 3.4 kB, 12 MB.
func byteSize(n int64) string {
	const unit = 1000
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}

// validTarget reports whether a rule can name host and port: the gateway
// decides every other target as invalid (netpolicy's Decide: a host that
// does not normalize, or port 0), whatever the policy.
func validTarget(host string, p int) bool {
	if port(p) == 0 {
		return false
	}
	_, err := netpolicy.NormalizeHost(host)
	return err == nil
}

// targetAnswers are the answers to the gateway's questions about one
// target, from the report's approvals.
type targetAnswers struct {
	allowed, denied bool // by a person (not by timeout)
	through         bool // an attempt at the target went through
	list            []Approval
}

// maxAnswerNotes bounds the answers a rule's comment names.
const maxAnswerNotes = 5

// notes are the comment lines naming a's answers: who answered what,
// when, and to which question.
func (a *targetAnswers) notes() []string {
	if a == nil {
		return nil
	}
	var out []string
	for i, ap := range a.list {
		if i == maxAnswerNotes {
			out = append(out, fmt.Sprintf("and %s more", plural(uint64(len(a.list)-i), "answer", "answers")))
			break
		}
		when := ap.Time.UTC().Format("2006-01-02 15:04:05Z07:00")
		switch ap.By {
		case byTimeout:
			out = append(out, fmt.Sprintf("asked (question %s), no answer came: blocked at %s", ap.ApprovalID, when))
			continue
		case byClosed:
			out = append(out, fmt.Sprintf("asked (question %s), the gateway closed before an answer came: blocked at %s", ap.ApprovalID, when))
			continue
		}
		out = append(out, fmt.Sprintf("%s %s by %s at %s (question %s)", answerVerb(ap.Answer), ap.Scope, ap.By, when, ap.ApprovalID))
	}
	return out
}

func answerVerb(answer string) string {
	switch answer {
	case "allow":
		return "allowed"
	case "deny":
		return "denied"
	}
	return "answered " + answer
}

// The by of an approval record when no person answered: no answer came
// in time (approval.ByTimeout), or the gateway closed first
// (approval.ByClosed).
const (
	byTimeout = "timeout"
	byClosed  = "closed"
)

// byPerson reports whether by, an approval record's, is a person's
// answer rather than the gateway's word for none.
func byPerson(by string) bool { return by != byTimeout && by != byClosed }

// answerKey is the key of answersByTarget and of Expect's answers: the
// host as netpolicy normalizes it (as it is when it does not), and the
// port, so that the spellings of one host are one target.
func answerKey(host string, port int) targetKey {
	if h, err := netpolicy.NormalizeHost(host); err == nil {
		host = h
	}
	return targetKey{host, port}
}

// answersByTarget indexes the report's answers by answerKey, noting
// which targets an attempt went through at (allowed, intercepted, or
// passed by a rule and refused by the address guard).
func answersByTarget(rep *Report) map[targetKey]*targetAnswers {
	m := map[targetKey]*targetAnswers{}
	for _, ap := range rep.Approvals {
		k := answerKey(ap.Host, ap.Port)
		a := m[k]
		if a == nil {
			a = &targetAnswers{}
			m[k] = a
		}
		a.list = append(a.list, ap)
		if byPerson(ap.By) {
			a.allowed = a.allowed || ap.Answer == "allow"
			a.denied = a.denied || ap.Answer == "deny"
		}
	}
	for _, t := range rep.Targets {
		if a := m[answerKey(t.Host, t.Port)]; a != nil && t.Allowed+t.Intercepted+t.Guarded > 0 {
			a.through = true
		}
	}
	return m
}

// deniedTarget reports whether the suggested policy blocks t, whose
// answers are a: a person denied it when asked, no person allowed it,
// and no attempt at it (by any spelling of its host) went through.
func deniedTarget(t *Target, a *targetAnswers) bool {
	return a != nil && a.denied && !a.allowed && !a.through
}

// deniedHosts returns the hosts every target of which in the report is
// a denied one (deniedTarget): their DNS queries are blocked with them.
func deniedHosts(rep *Report, asked map[targetKey]*targetAnswers) map[string]bool {
	m := map[string]bool{}
	for _, t := range rep.Targets {
		d := deniedTarget(t, asked[answerKey(t.Host, t.Port)])
		if was, seen := m[t.Host]; !seen || was {
			m[t.Host] = d
		}
	}
	return m
}
