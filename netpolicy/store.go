package netpolicy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Snapshot is one version of a running policy. It is immutable: a reader
// that holds one decides every request with the same rules and logs the
// same version, whatever changes meanwhile.
type Snapshot struct {
	version uint64
	policy  *Policy
	change  string
}

// Version starts at 1 and grows by one with every change.
func (s *Snapshot) Version() uint64 { return s.version }

// Policy is the policy of this version.
func (s *Snapshot) Policy() *Policy { return s.policy }

// Change says in a sentence what made this version, such as "rule gh added
// at position 0"; "policy loaded" for the first.
func (s *Snapshot) Change() string { return s.change }

// Store holds the running policy of a gateway. Load never locks and never
// sees half an update: every change builds a new Policy and swaps a pointer.
// Changes are serialized, and a change that fails leaves the store as it
// was. A Store is safe for concurrent use; make one with NewStore.
type Store struct {
	cur atomic.Pointer[Snapshot]
	mu  sync.Mutex // serializes writers
	// highID is the highest n of an id "rn" this store has held, so that
	// an added rule never takes the id of a removed one. Guarded by mu.
	highID int
	// onChange sees every new snapshot before Load can return it. Guarded
	// by mu.
	onChange func(*Snapshot)
	// checks may refuse a compiled policy before it is swapped in.
	// Guarded by mu.
	checks []func(*Policy) error
}

// AddCheck makes every later change's compiled policy pass fn before it
// is swapped in: an error from fn refuses the change, which leaves the
// store as it was and returns fn's error. The current policy must pass fn
// too, or AddCheck returns fn's error and adds nothing. Checks add up:
// each change must pass every one. A gateway uses it to refuse a policy
// that needs what it does not have (the LLM scripts a policy names).
func (s *Store) AddCheck(fn func(*Policy) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := fn(s.cur.Load().policy); err != nil {
		return err
	}
	s.checks = append(s.checks, fn)
	return nil
}

// OnChange makes fn be called with every new snapshot, under the writers'
// lock and before Load can return it: what fn records of a version (the
// gateway's policy record) comes before anything done under that version.
// There is one hook: fn replaces any earlier one. fn must not change the
// store.
func (s *Store) OnChange(fn func(next *Snapshot)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = fn
}

// NewStore returns a store whose version 1 is p.
func NewStore(p *Policy) *Store {
	s := &Store{highID: highestID(p.spec.Rules, 0)}
	s.cur.Store(&Snapshot{version: 1, policy: p, change: "policy loaded"})
	return s
}

// Load returns the current snapshot. It never blocks.
func (s *Store) Load() *Snapshot { return s.cur.Load() }

// Replace swaps in a whole new policy. Its rules without an id get ids
// above every one the store has held. When ifVersion is not zero and is
// not the current version, nothing changes and the error wraps
// ErrVersionMismatch. An invalid spec changes nothing and returns Compile's
// error.
func (s *Store) Replace(spec Spec, ifVersion uint64) (*Snapshot, error) {
	return s.replace(spec, ifVersion, "policy replaced")
}

// Reload swaps in a whole new policy as Replace does, whatever the
// version, and says what made it with change (such as "policy reloaded
// from policy.yaml on SIGHUP"), followed by its count of rules.
func (s *Store) Reload(spec Spec, change string) (*Snapshot, error) {
	return s.replace(spec, 0, change)
}

// replace is Replace with the start of the change's sentence.
func (s *Store) replace(spec Spec, ifVersion uint64, change string) (*Snapshot, error) {
	return s.update(ifVersion, func(Spec) (Spec, string, error) {
		spec = spec.clone()
		high := highestID(spec.Rules, s.highID)
		for i := range spec.Rules {
			if spec.Rules[i].ID == "" {
				high++
				spec.Rules[i].ID = "r" + strconv.Itoa(high)
			}
		}
		return spec, fmt.Sprintf("%s (%d rules)", change, len(spec.Rules)), nil
	})
}

// AddRule inserts r before the rule at position (0 is first); position -1,
// or the number of rules, appends it. A rule without an id gets the next
// "rN" above every one the store has held, so an id is never
// reused for a different rule. It returns the new snapshot; the added rule, normalized,
// is in its policy under that id.
func (s *Store) AddRule(r Rule, position int, ifVersion uint64) (*Snapshot, Rule, error) {
	var added Rule
	snap, err := s.update(ifVersion, func(spec Spec) (Spec, string, error) {
		n := len(spec.Rules)
		if position == -1 {
			position = n
		}
		if position < 0 || position > n {
			return spec, "", errorf(ErrInvalidRule, "position %d is outside 0..%d (there are %d rules; -1 appends)", position, n, n)
		}
		r = r.clone()
		if r.ID == "" {
			r.ID = "r" + strconv.Itoa(highestID(spec.Rules, s.highID)+1)
		}
		spec.Rules = slices.Insert(spec.Rules, position, r)
		return spec, fmt.Sprintf("rule %s added at position %d", r.ID, position), nil
	})
	if err != nil {
		return nil, Rule{}, err
	}
	for _, nr := range snap.policy.spec.Rules {
		if nr.ID == r.ID {
			added = nr.clone()
		}
	}
	return snap, added, nil
}

// RemoveRule deletes the rule with the given id. An unknown id changes
// nothing and returns an error wrapping ErrRuleNotFound.
func (s *Store) RemoveRule(id string, ifVersion uint64) (*Snapshot, error) {
	return s.update(ifVersion, func(spec Spec) (Spec, string, error) {
		i := slices.IndexFunc(spec.Rules, func(r Rule) bool { return r.ID == id })
		if i < 0 {
			return spec, "", errorf(ErrRuleNotFound, "no rule with id %q", id)
		}
		spec.Rules = slices.Delete(spec.Rules, i, i+1)
		return spec, fmt.Sprintf("rule %s removed", id), nil
	})
}

// update applies change to a copy of the current spec under the writer
// lock and swaps in the result only when it compiles.
func (s *Store) update(ifVersion uint64, change func(Spec) (Spec, string, error)) (*Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cur.Load()
	if ifVersion != 0 && ifVersion != cur.version {
		return nil, errorf(ErrVersionMismatch, "policy version %d was expected, but the current version is %d; fetch the policy again and retry", ifVersion, cur.version)
	}
	spec, what, err := change(cur.policy.Spec())
	if err != nil {
		return nil, err
	}
	p, err := Compile(spec)
	if err != nil {
		return nil, err
	}
	for _, check := range s.checks {
		if err := check(p); err != nil {
			return nil, err
		}
	}
	next := &Snapshot{version: cur.version + 1, policy: p, change: what}
	s.highID = highestID(p.spec.Rules, s.highID)
	if s.onChange != nil {
		s.onChange(next)
	}
	s.cur.Store(next)
	return next, nil
}

// maxAutoID bounds the ids "rn" that count for numbering, so that a rule
// named r9223372036854775807 cannot make the next id overflow.
const maxAutoID = 1_000_000_000

// highestID returns the highest n below maxAutoID of the ids "rn" in rules,
// or high if that is higher.
func highestID(rules []Rule, high int) int {
	for _, r := range rules {
		if rest, ok := strings.CutPrefix(r.ID, "r"); ok && len(rest) <= 9 {
			if n, err := strconv.Atoi(rest); err == nil && n > high && n < maxAutoID {
				high = n
			}
		}
	}
	return high
}
