package audit

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sbx-dev/sbx/gateway/decisionlog"
	"github.com/sbx-dev/sbx/netpolicy"
)

// ReportVersion is the version of the JSON report's format.
const ReportVersion = 1

// Limits bound what a Summary keeps, so that a log of any size, or one a
// sandbox filled with random names on purpose, is read in bounded memory.
// What goes over a limit is still counted, in the summary's Overflow, and
// the report says so. The zero value of a field means its default.
type Limits struct {
	// Targets is how many distinct (host, port) targets, DNS names,
	// bypass targets and processes are kept, each: 65 536 by default.
	Targets int
	// Paths is how many distinct (target, path) pairs are kept in all:
	// 200 000 by default.
	Paths int
}

func (l Limits) withDefaults() Limits {
	if l.Targets <= 0 {
		l.Targets = 1 << 16
	}
	if l.Paths <= 0 {
		l.Paths = 200_000
	}
	return l
}

// Counts are the verdicts of a set of attempts.
type Counts struct {
	Allowed     uint64 `json:"allowed"`
	Blocked     uint64 `json:"blocked"`
	Intercepted uint64 `json:"intercepted"`
	// Unenforced counts the blocked attempts that audit mode let through
	// (they are in Blocked too).
	Unenforced uint64 `json:"unenforced,omitempty"`
}

func (c *Counts) add(r *decisionlog.Record, n uint64) {
	switch r.Action {
	case "allow":
		c.Allowed = satAdd(c.Allowed, n)
	case "intercept":
		c.Intercepted = satAdd(c.Intercepted, n)
	default:
		c.Blocked = satAdd(c.Blocked, n)
		if !r.Enforced && r.Event == decisionlog.EventDecision && r.Action == "block" && r.Kind != decisionlog.KindBypass && r.Kind != decisionlog.KindDNS {
			c.Unenforced = satAdd(c.Unenforced, n)
		}
	}
}

// merge adds o to c.
func (c *Counts) merge(o Counts) {
	c.Allowed = satAdd(c.Allowed, o.Allowed)
	c.Blocked = satAdd(c.Blocked, o.Blocked)
	c.Intercepted = satAdd(c.Intercepted, o.Intercepted)
	c.Unenforced = satAdd(c.Unenforced, o.Unenforced)
}

// satAdd is a+b, or the largest uint64 when that overflows: a log can
// claim any count.
func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// addBytes is a+b for a byte count: a negative b (no gateway writes one)
// adds nothing, and a sum over the largest int64 stays there.
func addBytes(a, b int64) int64 {
	if b <= 0 {
		return a
	}
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Total is the number of attempts counted (at most the largest uint64).
func (c Counts) Total() uint64 { return satAdd(satAdd(c.Allowed, c.Blocked), c.Intercepted) }

// Seen is when something was first and last seen.
type Seen struct {
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

func (s *Seen) add(t time.Time) {
	if t.IsZero() {
		return
	}
	if s.First.IsZero() || t.Before(s.First) {
		s.First = t
	}
	if t.After(s.Last) {
		s.Last = t
	}
}

// PathCount is a path and how many requests asked for it.
type PathCount struct {
	Path  string `json:"path"`
	Count uint64 `json:"count"`
}

// Target is one row of the report: what the sandbox tried to reach at one
// (host, port) by HTTP through the proxy, CONNECT or a transparent
// connection.
type Target struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	// Kinds are the record kinds seen (http, connect, transparent).
	Kinds []string `json:"kinds"`
	// Methods are the HTTP methods seen, CONNECT included; a transparent
	// connection that was not plain HTTP has none.
	Methods []string `json:"methods"`
	// MethodsIncomplete says this target saw more methods than are kept
	// (maxMethods): the others are not listed.
	MethodsIncomplete bool `json:"methods_incomplete,omitempty"`
	// Paths are the paths of plain HTTP requests, the most frequent first
	// (all that were kept; see PathsIncomplete).
	Paths []PathCount `json:"paths,omitempty"`
	// PathsIncomplete says some paths of this target were not kept
	// (Limits.Paths).
	PathsIncomplete bool `json:"paths_incomplete,omitempty"`
	// PathsCut says the log cut some request's path short (the gateway
	// logs at most 1024 bytes of a path): what was asked for is not
	// known past the cut.
	PathsCut bool `json:"paths_cut,omitempty"`
	// Tunnels counts the attempts that carried no method and path the
	// gateway could see: CONNECT tunnels and transparent connections that
	// were not plain HTTP.
	Tunnels uint64 `json:"tunnels"`
	// InspectedTunnels counts the tunnels the gateway decrypted (TLS
	// inspection, docs/inspection.md); each request in them is an attempt of
	// kind https of its own, with its method and path.
	InspectedTunnels uint64 `json:"inspected_tunnels,omitempty"`
	Counts
	BytesOut int64 `json:"bytes_out"`
	BytesIn  int64 `json:"bytes_in"`
	Seen
	// Rules are the rules that decided, with how many attempts each.
	Rules map[string]uint64 `json:"rules"`
	// Invalid counts the attempts the gateway refused whatever the policy
	// (rule invalid: a malformed request, a Host header or TLS server
	// name that is not the target's; rule secret: a secret's placeholder
	// sent where the secret is not), ClosedByTLSCheck included. They are
	// in Blocked too.
	Invalid uint64 `json:"invalid,omitempty"`
	// ClosedByTLSCheck counts the tunnels the gateway opened and then
	// closed, since their first bytes were a TLS ClientHello for another
	// host than the target, or one it could not parse: each is counted
	// twice, allowed when it was decided and blocked when it was closed.
	ClosedByTLSCheck uint64 `json:"closed_by_tls_check,omitempty"`
	// Guarded counts the attempts the address guard refused for the
	// address the target was or resolved to (see Report.GuardAddrs);
	// they are in Blocked too. Fenced counts those of them whose record
	// names no address a policy can exempt: the gateway's own, this
	// host's or the sandbox pool's, which no policy reaches (or a log
	// of an sbx that did not name them).
	Guarded uint64 `json:"guarded,omitempty"`
	Fenced  uint64 `json:"fenced,omitempty"`
	// Capped counts the attempts a per-client cap of the gateway refused
	// (the tunnel cap, tunnels_per_client: the sandbox had as many
	// tunnels open as it may), whatever the policy; they are in Blocked
	// too, and in Rules as "cap tunnels_per_client". No rule lifts them.
	Capped uint64 `json:"capped,omitempty"`
	// InterceptStatus is the highest status of the intercepted answers
	// (the same whatever the order of the records).
	InterceptStatus int `json:"intercept_status,omitempty"`
	// MockLLM counts the intercepted requests a scripted LLM answered
	// (--mock-llm, or a rule's response: {llm: ...}).
	MockLLM uint64 `json:"mock_llm,omitempty"`
	// Processes are the processes (comm) that made the attempts, when the
	// log names them.
	Processes []string `json:"processes,omitempty"`

	kinds, methods, procs set
	paths                 map[string]uint64
}

// DNSName is one name the sandbox looked up through the DNS stub.
type DNSName struct {
	Name string `json:"name"`
	// Types are the query types (A, AAAA, ...).
	Types []string `json:"types"`
	Counts
	Seen
	Processes []string `json:"processes,omitempty"`

	types, procs set
}

// Bypass is one target of packets the sandbox sent around the gateway
// (UDP, ICMP, other protocols), which its rules refused.
type Bypass struct {
	Proto string `json:"proto"`
	Host  string `json:"host"`
	Port  int    `json:"port"`
	// Packets is how many packets the records stand for; Records how
	// many records there were.
	Packets uint64 `json:"packets"`
	Records uint64 `json:"records"`
	Seen
	Processes []string `json:"processes,omitempty"`

	procs set
}

// Process is one process of the sandbox that the log names.
type Process struct {
	Comm string `json:"comm"`
	Exe  string `json:"exe,omitempty"`
	// Attempts counts its decisions, DNS queries and bypass records.
	Counts
	// Targets is how many distinct targets it tried (at most 4096 are
	// counted).
	Targets int `json:"targets"`
	PIDs    int `json:"pids"`

	targets map[uint64]struct{} // hashes of the targets
	pids    map[int]struct{}
}

// Bucket is one interval of the timeline.
type Bucket struct {
	Start time.Time `json:"start"`
	Counts
}

// Overflow counts what went over the Limits and was counted but not kept
// apart.
type Overflow struct {
	Targets   uint64 `json:"targets,omitempty"`
	DNSNames  uint64 `json:"dns_names,omitempty"`
	Bypass    uint64 `json:"bypass,omitempty"`
	Processes uint64 `json:"processes,omitempty"`
	Paths     uint64 `json:"paths,omitempty"`
	// GuardAddrs counts the refused addresses beyond the first
	// Limits.Targets, which Report.GuardAddrs does not list.
	GuardAddrs uint64 `json:"guard_addrs,omitempty"`
}

func (o Overflow) any() bool { return o != Overflow{} }

// Report is what sbx audit says of a set of decision logs (docs/audit.md).
type Report struct {
	V int `json:"v"`
	// Logs are the names of the logs read.
	Logs      []string `json:"logs"`
	Sandboxes []string `json:"sandboxes"`
	Seen
	// Records is how many records were read.
	Records uint64 `json:"records"`
	// Requests counts the decisions of kinds http, connect and
	// transparent.
	Requests Counts `json:"requests"`
	DNS      Counts `json:"dns"`
	// BypassPackets counts the packets of bypass records.
	BypassPackets uint64 `json:"bypass_packets"`
	BytesOut      int64  `json:"bytes_out"`
	BytesIn       int64  `json:"bytes_in"`
	// ClosedByTLSCheck counts the tunnels the gateway closed after it
	// opened them (see Target.ClosedByTLSCheck); they are in Requests
	// twice, allowed and blocked.
	ClosedByTLSCheck uint64 `json:"closed_by_tls_check,omitempty"`
	// RefusedClients counts connections refused before any request (kind
	// conn: a client not of the sandbox, or over its connection cap), by
	// the records' counts: a record can stand for many refusals.
	RefusedClients uint64 `json:"refused_clients"`
	// Capped counts the refusals by each per-client cap of the gateway,
	// by its name (decisionlog.CapConns: connections over the connection
	// cap, in RefusedClients too; decisionlog.CapTunnels: tunnels over
	// the tunnel cap, in Requests and the targets too), by the records'
	// counts. A refusal by a cap is not a policy block: no rule lifts it.
	Capped map[string]uint64 `json:"capped,omitempty"`
	// PolicyChanges are the policy records' changes, in order.
	PolicyChanges []PolicyChange `json:"policy_changes"`
	// Approvals are the answers to the gateway's questions (approval
	// records with an answer), in order: who allowed or denied what.
	Approvals []Approval `json:"approvals,omitempty"`
	// Dropped is how many records the gateway left out of the logs to stay
	// within its budget (dropped records): the logs are incomplete when it
	// is not 0.
	Dropped uint64 `json:"dropped"`
	// Unknown counts the records of kinds and events this sbx audit does
	// not know (a newer gateway wrote them), by `kind "x"` or `event
	// "y"` (the first 64; the rest under "others"). They are counted in
	// Records only: the tables do not show them.
	Unknown map[string]uint64 `json:"unknown,omitempty"`
	// Truncated says of each log whose last line was cut short (no
	// newline, not a whole record) where, and why that may be: the logs
	// are incomplete when it is not empty.
	Truncated []string `json:"truncated,omitempty"`
	// Gaps says of each log whose seqs skip records that no dropped
	// record accounts for how many, and where (see LogRead.Gaps): the
	// logs are incomplete when it is not empty.
	Gaps []string `json:"gaps,omitempty"`
	// GuardAddrs are the addresses the address guard refused that a
	// policy can exempt (the records' addrs): private or reserved
	// addresses the targets' names resolved to, such as a registry
	// mirror's on a lab network. allow_private exempts them. Sorted by
	// address.
	GuardAddrs []GuardAddr `json:"guard_addrs,omitempty"`

	Targets   []*Target  `json:"targets"`
	DNSNames  []*DNSName `json:"dns_names"`
	Bypass    []*Bypass  `json:"bypass"`
	Processes []*Process `json:"processes"`
	// Timeline counts the attempts per interval of BucketSeconds, over
	// the whole span; at most MaxBuckets intervals.
	BucketSeconds int64    `json:"bucket_seconds"`
	Timeline      []Bucket `json:"timeline"`
	Overflow      Overflow `json:"overflow"`
}

// GuardAddr is one address the address guard refused.
type GuardAddr struct {
	Addr string `json:"addr"`
	// Class is the special range it is in, as the guard names it, such
	// as "private (RFC 1918)".
	Class string `json:"class"`
	// Host is the first target host seen refused for it.
	Host string `json:"host"`
	// Attempts counts the refused attempts whose records name it.
	Attempts uint64 `json:"attempts"`
}

// PolicyChange is one policy record.
type PolicyChange struct {
	Time          time.Time `json:"time"`
	PolicyVersion uint64    `json:"policy_version"`
	Change        string    `json:"change"`
}

// Approval is the answer to one question of the gateway (an approval
// record with an answer): By is tty, cli, api, ui, or timeout when no
// answer came, closed when the gateway closed before one did.
type Approval struct {
	Time       time.Time `json:"time"`
	ApprovalID string    `json:"approval_id"`
	Host       string    `json:"host"`
	Port       int       `json:"port"`
	Answer     string    `json:"answer"`
	Scope      string    `json:"scope"`
	By         string    `json:"by"`
}

// maxPolicyChanges bounds Report.PolicyChanges (and Report.Approvals); later ones are counted in
// the last entry's place.
const maxPolicyChanges = 1000

// maxMethods is the most methods a target keeps.
const maxMethods = 32

// MaxBuckets is the most intervals a timeline has.
const MaxBuckets = 120

type targetKey struct {
	host string
	port int
}

type bypassKey struct {
	proto, host string
	port        int
}

type procKey struct{ comm, exe string }

// Summary gathers records into a Report, in memory bounded by its Limits.
// Records may come in any order and from several logs: the counts, bytes
// and times do not depend on the order, and neither does what is kept as
// long as no cap is reached. When one is (rows, paths, and per row 32
// methods, 64 rules, 16 processes or DNS types), what came first is kept
// and the rest is counted or said to be left out, so which entries are
// listed then depends on the order. Make one with NewSummary. A Summary
// is not safe for concurrent use.
type Summary struct {
	lim       Limits
	r         Report
	sandboxes set
	targets   map[targetKey]*Target
	dns       map[string]*DNSName
	bypass    map[bypassKey]*Bypass
	procs     map[procKey]*Process
	paths     int // (target, path) pairs kept
	guard     map[netip.Addr]*GuardAddr
	changes   uint64
	seed      maphash.Seed // of the hashes of processes' targets

	// The timeline: counts per bucket of width bucketNS nanoseconds,
	// indexed by time/bucketNS; the width doubles whenever the span
	// needs more than MaxBuckets buckets.
	bucketNS int64
	buckets  map[int64]*Counts
}

// NewSummary returns an empty Summary with the given limits.
func NewSummary(lim Limits) *Summary {
	return &Summary{
		lim:      lim.withDefaults(),
		r:        Report{V: ReportVersion},
		targets:  map[targetKey]*Target{},
		dns:      map[string]*DNSName{},
		bypass:   map[bypassKey]*Bypass{},
		procs:    map[procKey]*Process{},
		guard:    map[netip.Addr]*GuardAddr{},
		seed:     maphash.MakeSeed(),
		bucketNS: int64(time.Second),
		buckets:  map[int64]*Counts{},
	}
}

// AddTruncated notes that the last line of a log read into the Summary
// was cut short (see LogRead.Truncated).
func (s *Summary) AddTruncated(l LogRead) { s.r.Truncated = append(s.r.Truncated, l.Truncated()) }

// AddGaps notes that a log read into the Summary lacks records by its
// seqs (see LogRead.Gaps).
func (s *Summary) AddGaps(l LogRead) { s.r.Gaps = append(s.r.Gaps, l.Gaps()) }

// AddLog notes the name of a log that is read into the Summary.
func (s *Summary) AddLog(name string) { s.r.Logs = append(s.r.Logs, name) }

// Add counts one record.
//
// Every string of r that the Summary keeps is cut to a bound first (see
// clipRecord), so that a log of huge strings is read in bounded memory.
func (s *Summary) Add(rec *decisionlog.Record) {
	c := clipRecord(rec)
	r := &c
	s.r.Records++
	s.r.Seen.add(r.Time)
	if r.Sandbox != "" && len(s.sandboxes) < 1024 {
		s.sandboxes.add(r.Sandbox)
	}
	switch r.Event {
	case decisionlog.EventPolicy:
		s.changes++
		if len(s.r.PolicyChanges) < maxPolicyChanges {
			s.r.PolicyChanges = append(s.r.PolicyChanges, PolicyChange{Time: r.Time, PolicyVersion: r.PolicyVersion, Change: r.Change})
		}
		return
	case decisionlog.EventDropped:
		s.r.Dropped = satAdd(s.r.Dropped, droppedCount(r))
		return
	case decisionlog.EventClose:
		s.addClose(r)
		return
	case decisionlog.EventApproval:
		if r.Answer != "" && len(s.r.Approvals) < maxPolicyChanges {
			s.r.Approvals = append(s.r.Approvals, Approval{Time: r.Time, ApprovalID: r.ApprovalID, Host: r.Host, Port: r.Port, Answer: r.Answer, Scope: r.Scope, By: r.By})
		}
		return
	case decisionlog.EventDecision:
	default:
		s.addUnknown("event", r.Event) // of a later version
		return
	}
	switch r.Kind {
	case decisionlog.KindConn:
		n := refusals(r)
		s.r.RefusedClients = satAdd(s.r.RefusedClients, n)
		s.addCapped(r, n)
		return
	case decisionlog.KindDNS:
		s.r.DNS.add(r, 1)
		s.addDNS(r)
		s.addProcess(r, 1, "dns", r.Host, 0)
		s.tick(r, 1)
		return
	case decisionlog.KindBypass:
		n := max(r.Count, 1)
		s.r.BypassPackets = satAdd(s.r.BypassPackets, n)
		s.addBypass(r, n)
		s.addProcess(r, 1, r.Proto, r.Host, r.Port)
		return
	case decisionlog.KindHTTP, decisionlog.KindHTTPS, decisionlog.KindConnect, decisionlog.KindTransparent:
	default:
		s.addUnknown("kind", r.Kind) // of a later version
		return
	}
	// A refusal by a per-client cap stands for count refusals (the
	// gateway folds a flood of them); any other decision for one.
	n := refusals(r)
	s.r.Requests.add(r, n)
	s.tick(r, n)
	s.addCapped(r, n)
	t := s.target(r, n)
	if t == nil {
		return
	}
	t.Counts.add(r, n)
	t.Seen.add(r.Time)
	if t.Rules == nil {
		t.Rules = map[string]uint64{}
	}
	rule := r.Rule
	if r.Cap != "" {
		rule = "cap " + clipString(r.Cap, maxShortString)
		t.Capped = satAdd(t.Capped, n)
	}
	if _, ok := t.Rules[rule]; ok || len(t.Rules) < 64 {
		t.Rules[rule] = satAdd(t.Rules[rule], n)
	}
	t.kinds.add(r.Kind)
	if r.Rule == netpolicy.RuleInvalid || r.Secret != "" { // refused whatever the policy
		t.Invalid = satAdd(t.Invalid, n)
	}
	if guardRefused(r) {
		t.Guarded = satAdd(t.Guarded, n)
		if s.addGuardAddrs(rec.Addrs, t.Host) == 0 {
			t.Fenced = satAdd(t.Fenced, n)
		}
	}
	if r.Action == "intercept" {
		t.InterceptStatus = max(t.InterceptStatus, r.Status)
		if strings.HasPrefix(r.Reason, decisionlog.ReasonMockLLM) {
			t.MockLLM = satAdd(t.MockLLM, n)
		}
	}
	switch {
	case isTunnel(r.Method) && r.Action == "allow" && r.Reason == netpolicy.InspectedReason:
		t.InspectedTunnels = satAdd(t.InspectedTunnels, n) // its requests are records of their own (kind https)
	case isTunnel(r.Method):
		t.Tunnels = satAdd(t.Tunnels, n)
	}
	if r.Method != "" && !t.methods.has(r.Method) {
		if len(t.methods) < maxMethods && len(rec.Method) <= maxShortString {
			t.methods.add(r.Method)
		} else {
			t.MethodsIncomplete = true
		}
	}
	if !isTunnel(r.Method) {
		if pathCut(r.Path) {
			t.PathsCut = true
		}
		s.addPath(t, r.Path, n)
	}
	if r.PID != 0 && len(t.procs) < 16 {
		t.procs.add(r.Comm)
	}
	s.addProcess(r, n, "", t.Host, t.Port)
}

// refusals is how many attempts or refused connections a decision record
// stands for: its count (at least 1) for a record that folds a flood of
// refusals (kind conn, or a refusal by a per-client cap, which has cap),
// else 1.
func refusals(r *decisionlog.Record) uint64 {
	if r.Kind == decisionlog.KindConn || r.Cap != "" {
		return max(r.Count, 1)
	}
	return 1
}

// maxCaps is how many caps Report.Capped tells apart; the others (a log
// can name any) are counted under "others".
const maxCaps = 8

// addCapped counts n refusals by r's per-client cap, if it has one.
func (s *Summary) addCapped(r *decisionlog.Record, n uint64) {
	if r.Cap == "" {
		return
	}
	if s.r.Capped == nil {
		s.r.Capped = map[string]uint64{}
	}
	k := clipString(r.Cap, maxShortString)
	if _, ok := s.r.Capped[k]; !ok && len(s.r.Capped) >= maxCaps {
		k = "others"
	}
	s.r.Capped[k] = satAdd(s.r.Capped[k], n)
}

// addGuardAddrs counts the addresses of a guard refusal's addrs (see
// decisionlog.Record.Addrs), refused for host, and returns how many of
// the first decisionlog.MaxAddrs listed a policy can pass: the IP
// addresses without a zone (Replay passes them the same way). Those in a
// special range are kept for Report.GuardAddrs.
func (s *Summary) addGuardAddrs(addrs, host string) int {
	n := 0
	for i := 0; addrs != "" && i < decisionlog.MaxAddrs; i++ {
		var a string
		a, addrs, _ = strings.Cut(addrs, ",")
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			continue
		}
		ip = ip.Unmap()
		g := s.guard[ip]
		if g == nil {
			class := netpolicy.AddrClass(ip)
			if class == "" {
				n++ // a public address, which the guard passes: nothing to exempt
				continue
			}
			if len(s.guard) >= s.lim.Targets {
				s.r.Overflow.GuardAddrs++
				n++
				continue
			}
			g = &GuardAddr{Addr: ip.String(), Class: class, Host: host}
			s.guard[ip] = g
		}
		n++
		g.Attempts++
	}
	return n
}

// maxUnknown is how many kinds and events Report.Unknown tells apart.
const maxUnknown = 64

// addUnknown counts a record of a kind or event this package does not
// know.
func (s *Summary) addUnknown(what, name string) {
	if s.r.Unknown == nil {
		s.r.Unknown = map[string]uint64{}
	}
	k := fmt.Sprintf("%s %q", what, name)
	if _, ok := s.r.Unknown[k]; !ok && len(s.r.Unknown) >= maxUnknown {
		k = "others"
	}
	s.r.Unknown[k]++
}

// target returns r's row, nil when the table is full (its n attempts
// are then counted in Overflow.Targets).
func (s *Summary) target(r *decisionlog.Record, n uint64) *Target {
	k := targetKey{r.Host, r.Port}
	t := s.targets[k]
	if t == nil {
		if len(s.targets) >= s.lim.Targets {
			s.r.Overflow.Targets = satAdd(s.r.Overflow.Targets, n)
			return nil
		}
		t = &Target{Host: r.Host, Port: r.Port}
		s.targets[k] = t
	}
	return t
}

func (s *Summary) addPath(t *Target, path string, n uint64) {
	if c, ok := t.paths[path]; ok {
		t.paths[path] = satAdd(c, n)
		return
	}
	if s.paths >= s.lim.Paths {
		s.r.Overflow.Paths = satAdd(s.r.Overflow.Paths, n)
		t.PathsIncomplete = true
		return
	}
	if t.paths == nil {
		t.paths = map[string]uint64{}
	}
	t.paths[path] = n
	s.paths++
}

func (s *Summary) addClose(r *decisionlog.Record) {
	s.r.BytesOut = addBytes(s.r.BytesOut, r.BytesOut)
	s.r.BytesIn = addBytes(s.r.BytesIn, r.BytesIn)
	switch r.Kind {
	case decisionlog.KindHTTP, decisionlog.KindHTTPS, decisionlog.KindConnect, decisionlog.KindTransparent:
	case decisionlog.KindDNS, decisionlog.KindBypass, decisionlog.KindConn:
		return
	default:
		s.addUnknown("kind", r.Kind)
		return
	}
	// The row is made here when the close comes first, which merged logs
	// or a log read out of order allow.
	t := s.target(r, 1)
	if t != nil {
		t.BytesOut = addBytes(t.BytesOut, r.BytesOut)
		t.BytesIn = addBytes(t.BytesIn, r.BytesIn)
		t.Seen.add(r.Time)
	}
	if !closedByTLSCheck(r) {
		return
	}
	// A tunnel the TLS check closed: a blocked attempt, on top of its
	// allowed decision.
	s.r.ClosedByTLSCheck++
	s.r.Requests.add(r, 1)
	s.tick(r, 1)
	if t == nil {
		return
	}
	t.Counts.add(r, 1)
	t.Invalid++
	t.ClosedByTLSCheck++
	if t.Rules == nil {
		t.Rules = map[string]uint64{}
	}
	if _, ok := t.Rules[r.Rule]; ok || len(t.Rules) < 64 {
		t.Rules[r.Rule]++
	}
}

func (s *Summary) addDNS(r *decisionlog.Record) {
	d := s.dns[r.Host]
	if d == nil {
		if len(s.dns) >= s.lim.Targets {
			s.r.Overflow.DNSNames++
			return
		}
		d = &DNSName{Name: r.Host}
		s.dns[r.Host] = d
	}
	d.Counts.add(r, 1)
	d.Seen.add(r.Time)
	if r.Method != "" && len(d.types) < 16 {
		d.types.add(r.Method)
	}
	if r.PID != 0 && len(d.procs) < 16 {
		d.procs.add(r.Comm)
	}
}

func (s *Summary) addBypass(r *decisionlog.Record, n uint64) {
	k := bypassKey{r.Proto, r.Host, r.Port}
	b := s.bypass[k]
	if b == nil {
		if len(s.bypass) >= s.lim.Targets {
			s.r.Overflow.Bypass = satAdd(s.r.Overflow.Bypass, n)
			return
		}
		b = &Bypass{Proto: r.Proto, Host: r.Host, Port: r.Port}
		s.bypass[k] = b
	}
	b.Packets = satAdd(b.Packets, n)
	b.Records++
	b.Seen.add(r.Time)
	if r.PID != 0 && len(b.procs) < 16 {
		b.procs.add(r.Comm)
	}
}

// addProcess counts r for the process it names, if any; what, host and
// port name what it tried, for the process's count of distinct targets.
func (s *Summary) addProcess(r *decisionlog.Record, n uint64, what, host string, port int) {
	if r.PID == 0 {
		return
	}
	k := procKey{r.Comm, r.Exe}
	p := s.procs[k]
	if p == nil {
		if len(s.procs) >= s.lim.Targets {
			s.r.Overflow.Processes++
			return
		}
		p = &Process{Comm: r.Comm, Exe: r.Exe, targets: map[uint64]struct{}{}, pids: map[int]struct{}{}}
		s.procs[k] = p
	}
	p.Counts.add(r, n)
	if len(p.targets) < 4096 {
		var h maphash.Hash
		h.SetSeed(s.seed)
		h.WriteString(what)
		h.WriteByte(0)
		h.WriteString(host)
		h.WriteByte(0)
		h.WriteString(strconv.Itoa(port))
		p.targets[h.Sum64()] = struct{}{}
	}
	if len(p.pids) < 4096 {
		p.pids[r.PID] = struct{}{}
	}
}

// tick counts r in the timeline.
func (s *Summary) tick(r *decisionlog.Record, n uint64) {
	if r.Time.IsZero() {
		return
	}
	i := floorDiv(r.Time.UnixNano(), s.bucketNS)
	c := s.buckets[i]
	if c == nil {
		c = &Counts{}
		s.buckets[i] = c
		for s.spanBuckets() > MaxBuckets {
			s.widen()
		}
		c = s.buckets[floorDiv(r.Time.UnixNano(), s.bucketNS)]
	}
	c.add(r, n)
}

// spanBuckets is how many buckets the span from the first to the last
// bucket covers.
func (s *Summary) spanBuckets() int64 {
	lo, hi := s.bucketRange()
	return hi - lo + 1
}

// bucketRange returns the indexes of the first and last buckets; 0, -1
// when there is none.
func (s *Summary) bucketRange() (lo, hi int64) {
	lo, hi = 0, -1
	first := true
	for i := range s.buckets {
		if first || i < lo {
			lo = i
		}
		if first || i > hi {
			hi = i
		}
		first = false
	}
	return lo, hi
}

// widen doubles the bucket width, merging pairs of buckets.
func (s *Summary) widen() {
	s.bucketNS *= 2
	merged := make(map[int64]*Counts, len(s.buckets)/2+1)
	for i, c := range s.buckets {
		j := floorDiv(i, 2)
		m := merged[j]
		if m == nil {
			m = &Counts{}
			merged[j] = m
		}
		m.merge(*c)
	}
	s.buckets = merged
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// Report returns the report of what was added so far. Rows are sorted by
// host, then port (DNS names by name, bypass targets by protocol, host and
// port, processes by command name).
func (s *Summary) Report() *Report {
	r := s.r // a copy; the slices below are new
	r.Logs = slices.Clone(s.r.Logs)
	r.Truncated = slices.Clone(s.r.Truncated)
	r.Gaps = slices.Clone(s.r.Gaps)
	r.GuardAddrs = make([]GuardAddr, 0, len(s.guard))
	for _, g := range s.guard {
		r.GuardAddrs = append(r.GuardAddrs, *g)
	}
	slices.SortFunc(r.GuardAddrs, func(a, b GuardAddr) int {
		return netip.MustParseAddr(a.Addr).Compare(netip.MustParseAddr(b.Addr))
	})
	r.Unknown = maps.Clone(s.r.Unknown)
	r.Capped = maps.Clone(s.r.Capped)
	r.PolicyChanges = slices.Clone(s.r.PolicyChanges)
	r.Approvals = slices.Clone(s.r.Approvals)
	if extra := s.changes - uint64(len(r.PolicyChanges)); extra > 0 {
		r.PolicyChanges = append(r.PolicyChanges, PolicyChange{Change: fmt.Sprintf("%d more policy changes not listed", extra)})
	}
	r.Sandboxes = s.sandboxes.sorted()
	r.Targets = make([]*Target, 0, len(s.targets))
	for _, t := range s.targets {
		c := *t
		c.Kinds, c.Methods, c.Processes = t.kinds.sorted(), t.methods.sorted(), t.procs.sorted()
		c.Paths = make([]PathCount, 0, len(t.paths))
		for p, n := range t.paths {
			c.Paths = append(c.Paths, PathCount{p, n})
		}
		slices.SortFunc(c.Paths, func(a, b PathCount) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Path, b.Path))
		})
		r.Targets = append(r.Targets, &c)
	}
	slices.SortFunc(r.Targets, func(a, b *Target) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port))
	})
	r.DNSNames = make([]*DNSName, 0, len(s.dns))
	for _, d := range s.dns {
		c := *d
		c.Types, c.Processes = d.types.sorted(), d.procs.sorted()
		r.DNSNames = append(r.DNSNames, &c)
	}
	slices.SortFunc(r.DNSNames, func(a, b *DNSName) int { return strings.Compare(a.Name, b.Name) })
	r.Bypass = make([]*Bypass, 0, len(s.bypass))
	for _, b := range s.bypass {
		c := *b
		c.Processes = b.procs.sorted()
		r.Bypass = append(r.Bypass, &c)
	}
	slices.SortFunc(r.Bypass, func(a, b *Bypass) int {
		return cmp.Or(strings.Compare(a.Proto, b.Proto), strings.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port))
	})
	r.Processes = make([]*Process, 0, len(s.procs))
	for _, p := range s.procs {
		c := *p
		c.Targets, c.PIDs = len(p.targets), len(p.pids)
		c.targets, c.pids = nil, nil // the Summary's, and hashes with its seed
		r.Processes = append(r.Processes, &c)
	}
	slices.SortFunc(r.Processes, func(a, b *Process) int {
		return cmp.Or(strings.Compare(a.Comm, b.Comm), strings.Compare(a.Exe, b.Exe))
	})
	r.BucketSeconds = max(s.bucketNS/int64(time.Second), 1)
	r.Timeline = nil
	lo, hi := s.bucketRange()
	for i := lo; i <= hi; i++ {
		b := Bucket{Start: time.Unix(0, i*s.bucketNS).UTC()}
		if c := s.buckets[i]; c != nil {
			b.Counts = *c
		}
		r.Timeline = append(r.Timeline, b)
	}
	return &r
}

// set is a set of strings.
type set map[string]struct{}

func (s *set) add(v string) {
	if *s == nil {
		*s = set{}
	}
	(*s)[v] = struct{}{}
}

func (s set) has(v string) bool { _, ok := s[v]; return ok }

func (s set) sorted() []string {
	out := make([]string, 0, len(s))
	for v := range s {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
