package audit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// TargetChange is what changed at a target both reports saw.
type TargetChange struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	// NewKinds, NewMethods and NewPaths are what the new report has at
	// this target that the old one does not.
	NewKinds   []string `json:"new_kinds,omitempty"`
	NewMethods []string `json:"new_methods,omitempty"`
	NewPaths   []string `json:"new_paths,omitempty"`
	// PathsUncertain says a path the old report did not keep may be
	// listed as new, or one the new report did not keep missed.
	PathsUncertain bool `json:"paths_uncertain,omitempty"`
	// MethodsUncertain says the same of methods (more than 32 at one
	// target); a method the new report did not keep makes the diff
	// Incomplete.
	MethodsUncertain bool `json:"methods_uncertain,omitempty"`
	// Counts are old → new, when attempts or bytes changed by more than
	// the factor.
	OldAttempts uint64 `json:"old_attempts"`
	NewAttempts uint64 `json:"new_attempts"`
	OldBytes    int64  `json:"old_bytes"`
	NewBytes    int64  `json:"new_bytes"`
	// Changed says why the target is listed: "new kinds", "new methods",
	// "new paths", "attempts ×12", "bytes ×40", ...
	Changed []string `json:"changed"`
}

// Diff is what a new set of logs reaches that an old one did not
// (docs/audit.md, sbx audit --diff).
type Diff struct {
	Old    []string `json:"old"`
	New    []string `json:"new"`
	Factor float64  `json:"factor"`
	// NewTargets, NewDNSNames and NewBypass are rows only the new report
	// has; Gone* only the old one.
	NewTargets  []*Target  `json:"new_targets"`
	NewDNSNames []*DNSName `json:"new_dns_names"`
	NewBypass   []*Bypass  `json:"new_bypass"`
	GoneTargets []*Target  `json:"gone_targets"`
	GoneDNS     []*DNSName `json:"gone_dns_names"`
	GoneBypass  []*Bypass  `json:"gone_bypass"`
	// Changed are targets both have, with new kinds, methods or paths, or
	// counts that changed by more than Factor.
	Changed []*TargetChange `json:"changed"`
	// NewProcesses are command names only the new report has; they are
	// told, not judged.
	NewProcesses []string `json:"new_processes"`
	// Incomplete says why the diff may miss something: a report that
	// overflowed its limits, a log the gateway left records out of, or,
	// in the new report, targets with methods or paths not kept and
	// packets whose destinations the gateway did not keep apart.
	Incomplete []string `json:"incomplete"`
}

// ReachesNew reports whether the new logs reach anything the old ones do
// not: a target, a DNS name, a bypass destination, or a kind, method or
// path at a known target; or whether they are incomplete, so that this
// cannot be ruled out.
func (d *Diff) ReachesNew() bool {
	return len(d.Incomplete) > 0 || d.FoundNew()
}

// FoundNew reports whether the logs show the new ones reaching anything
// the old ones do not, as ReachesNew does but for the logs being
// incomplete: what the verdict may claim.
func (d *Diff) FoundNew() bool {
	if len(d.NewTargets)+len(d.NewDNSNames)+len(d.NewBypass) > 0 {
		return true
	}
	return slices.ContainsFunc(d.Changed, func(c *TargetChange) bool {
		return len(c.NewKinds)+len(c.NewMethods)+len(c.NewPaths) > 0
	})
}

// DiffReports compares two reports. factor (10 when 0 or less) is how many
// times more or fewer attempts or bytes a target must see to be listed.
func DiffReports(old, cur *Report, factor float64) *Diff {
	if factor <= 0 {
		factor = 10
	}
	d := &Diff{Old: old.Logs, New: cur.Logs, Factor: factor,
		NewTargets: []*Target{}, NewDNSNames: []*DNSName{}, NewBypass: []*Bypass{},
		GoneTargets: []*Target{}, GoneDNS: []*DNSName{}, GoneBypass: []*Bypass{},
		Changed: []*TargetChange{}, NewProcesses: []string{}, Incomplete: []string{}}
	for _, side := range []struct {
		name string
		r    *Report
	}{{"old", old}, {"new", cur}} {
		if len(side.r.Unknown) > 0 {
			d.Incomplete = append(d.Incomplete, "the "+side.name+" logs have "+side.r.unknownText()+"; upgrade sbx")
		}
		for _, t := range side.r.Truncated {
			d.Incomplete = append(d.Incomplete, "of the "+side.name+" logs, "+t)
		}
		for _, g := range side.r.Gaps {
			d.Incomplete = append(d.Incomplete, "of the "+side.name+" logs, "+g)
		}
		if side.r.Dropped > 0 {
			d.Incomplete = append(d.Incomplete, fmt.Sprintf("the %s logs lack %d records the gateway left out", side.name, side.r.Dropped))
		}
		if o := side.r.Overflow; o.Targets+o.DNSNames+o.Bypass > 0 {
			d.Incomplete = append(d.Incomplete, fmt.Sprintf("the %s logs have more targets than sbx audit keeps apart", side.name))
		}
	}

	// What the new report did not keep may be new: the diff cannot rule
	// it out, so it fails closed.
	if n := cur.Overflow.Paths; n > 0 {
		d.Incomplete = append(d.Incomplete, fmt.Sprintf("the new logs have %s whose paths sbx audit did not keep (over its limit of paths), so a new path may not be listed", plural(n, "request", "requests")))
	}
	var methodsNotKept, pathsNotKept []string
	for _, t := range cur.Targets {
		if t.MethodsIncomplete {
			methodsNotKept = append(methodsNotKept, hostPort(t.Host, t.Port))
		}
		if t.PathsIncomplete {
			pathsNotKept = append(pathsNotKept, hostPort(t.Host, t.Port))
		}
	}
	if len(methodsNotKept) > 0 {
		d.Incomplete = append(d.Incomplete, fmt.Sprintf("the new logs have more methods than sbx audit keeps (%d) at %s, so a new method may not be listed", maxMethods, strings.Join(first(methodsNotKept, 5), ", ")))
	}
	if len(pathsNotKept) > 0 && cur.Overflow.Paths == 0 {
		d.Incomplete = append(d.Incomplete, fmt.Sprintf("the new logs have paths sbx audit did not keep at %s, so a new path may not be listed", strings.Join(first(pathsNotKept, 5), ", ")))
	}
	for _, b := range cur.Bypass {
		if b.Host == "" {
			d.Incomplete = append(d.Incomplete, fmt.Sprintf("the new logs have %s around the gateway whose destinations the gateway did not keep apart, so a new destination may not be listed", plural(b.Packets, "packet", "packets")))
		}
	}

	oldT := map[targetKey]*Target{}
	for _, t := range old.Targets {
		oldT[targetKey{t.Host, t.Port}] = t
	}
	curT := map[targetKey]bool{}
	for _, t := range cur.Targets {
		curT[targetKey{t.Host, t.Port}] = true
		o := oldT[targetKey{t.Host, t.Port}]
		if o == nil {
			d.NewTargets = append(d.NewTargets, t)
			continue
		}
		c := &TargetChange{Host: t.Host, Port: t.Port, OldAttempts: o.Total(), NewAttempts: t.Total(),
			OldBytes: o.BytesOut + o.BytesIn, NewBytes: t.BytesOut + t.BytesIn}
		c.NewKinds = missing(t.Kinds, o.Kinds)
		c.NewMethods = missing(t.Methods, o.Methods)
		oldPaths := make([]string, len(o.Paths))
		for i, p := range o.Paths {
			oldPaths[i] = p.Path
		}
		for _, p := range t.Paths {
			if !slices.Contains(oldPaths, p.Path) {
				c.NewPaths = append(c.NewPaths, p.Path)
			}
		}
		slices.Sort(c.NewPaths)
		c.PathsUncertain = o.PathsIncomplete || t.PathsIncomplete
		c.MethodsUncertain = o.MethodsIncomplete || t.MethodsIncomplete
		for _, n := range []struct {
			name string
			vs   []string
		}{{"new kinds", c.NewKinds}, {"new methods", c.NewMethods}, {"new paths", c.NewPaths}} {
			if len(n.vs) > 0 {
				c.Changed = append(c.Changed, n.name)
			}
		}
		if s := ratio(float64(c.OldAttempts), float64(c.NewAttempts), factor); s != "" {
			c.Changed = append(c.Changed, "attempts "+s)
		}
		if s := ratio(float64(c.OldBytes), float64(c.NewBytes), factor); s != "" {
			c.Changed = append(c.Changed, "bytes "+s)
		}
		if len(c.Changed) > 0 {
			d.Changed = append(d.Changed, c)
		}
	}
	for _, t := range old.Targets {
		if !curT[targetKey{t.Host, t.Port}] {
			d.GoneTargets = append(d.GoneTargets, t)
		}
	}

	oldDNS := map[string]bool{}
	for _, n := range old.DNSNames {
		oldDNS[n.Name] = true
	}
	curDNS := map[string]bool{}
	for _, n := range cur.DNSNames {
		curDNS[n.Name] = true
		if !oldDNS[n.Name] {
			d.NewDNSNames = append(d.NewDNSNames, n)
		}
	}
	for _, n := range old.DNSNames {
		if !curDNS[n.Name] {
			d.GoneDNS = append(d.GoneDNS, n)
		}
	}

	oldB := map[bypassKey]bool{}
	for _, b := range old.Bypass {
		oldB[bypassKey{b.Proto, b.Host, b.Port}] = true
	}
	curB := map[bypassKey]bool{}
	for _, b := range cur.Bypass {
		curB[bypassKey{b.Proto, b.Host, b.Port}] = true
		if !oldB[bypassKey{b.Proto, b.Host, b.Port}] {
			d.NewBypass = append(d.NewBypass, b)
		}
	}
	for _, b := range old.Bypass {
		if !curB[bypassKey{b.Proto, b.Host, b.Port}] {
			d.GoneBypass = append(d.GoneBypass, b)
		}
	}

	oldP := map[string]bool{}
	for _, p := range old.Processes {
		oldP[p.Comm] = true
	}
	for _, p := range cur.Processes {
		if !oldP[p.Comm] && !slices.Contains(d.NewProcesses, p.Comm) {
			d.NewProcesses = append(d.NewProcesses, p.Comm)
		}
	}
	return d
}

// missing returns the values of a not in b.
func missing(a, b []string) []string {
	var out []string
	for _, v := range a {
		if !slices.Contains(b, v) {
			out = append(out, v)
		}
	}
	return out
}

// ratio says "×N" or "÷N" when cur differs from old by more than factor,
// else "".
func ratio(old, cur, factor float64) string {
	switch {
	case old == cur:
		return ""
	case old == 0:
		if cur >= factor {
			return "from 0 to " + strconv.FormatFloat(cur, 'f', -1, 64)
		}
		return ""
	case cur == 0:
		if old >= factor {
			return "from " + strconv.FormatFloat(old, 'f', -1, 64) + " to 0"
		}
		return ""
	case cur/old > factor:
		return fmt.Sprintf("×%.0f (%.0f → %.0f)", cur/old, old, cur)
	case old/cur > factor:
		return fmt.Sprintf("÷%.0f (%.0f → %.0f)", old/cur, old, cur)
	}
	return ""
}
