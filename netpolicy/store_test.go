package netpolicy

import (
	"errors"
	"slices"
	"sync"
	"testing"
)

func newTestStore(t *testing.T) *Store {
	t.Helper()
	return NewStore(mustCompile(t, Block,
		Rule{ID: "a", Host: "a.test", Action: Allow},
		Rule{Host: "b.test", Action: Allow},
	))
}

func ruleIDs(p *Policy) []string {
	var ids []string
	for _, r := range p.Rules() {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestStoreChanges(t *testing.T) {
	s := newTestStore(t)
	if v := s.Load().Version(); v != 1 {
		t.Fatalf("initial version = %d, want 1", v)
	}

	snap, added, err := s.AddRule(Rule{Host: "A.test", Action: Block}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version() != 2 || added.ID != "r2" || added.Host != "a.test" {
		t.Errorf("AddRule = version %d, rule %+v; want version 2, id r2 (after r1), host a.test", snap.Version(), added)
	}
	if d := s.Load().Policy().Decide(connect("a.test", 443)); d.Action != Block || d.Rule != "r2" {
		t.Errorf("after adding a block at position 0, Decide(a.test) = %+v, want block by r2", d)
	}
	if snap.Change() != "rule r2 added at position 0" {
		t.Errorf("Change = %q", snap.Change())
	}

	snap, added, err = s.AddRule(Rule{ID: "gh", Host: "api.github.com", Action: Allow}, -1, snap.Version())
	if err != nil {
		t.Fatal(err)
	}
	if got := ruleIDs(snap.Policy()); len(got) != 4 || got[3] != "gh" {
		t.Errorf("append: ids = %v, want gh last", got)
	}

	snap, err = s.RemoveRule("r2", 0)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version() != 4 || snap.Change() != "rule r2 removed" {
		t.Errorf("RemoveRule = version %d, change %q", snap.Version(), snap.Change())
	}
	if d := s.Load().Policy().Decide(connect("a.test", 443)); d.Action != Allow {
		t.Errorf("after removing r2, Decide(a.test) = %+v, want allow", d)
	}

	// Ids are not reused: a new rule after removing r2 gets r3.
	_, added, err = s.AddRule(Rule{Host: "c.test", Action: Allow}, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if added.ID != "r3" {
		t.Errorf("new id after a removal = %q, want r3", added.ID)
	}

	snap, err = s.Replace(Spec{Default: Allow}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version() != 6 || len(snap.Policy().Rules()) != 0 || snap.Policy().Default() != Allow {
		t.Errorf("Replace = version %d, %d rules, default %s", snap.Version(), len(snap.Policy().Rules()), snap.Policy().Default())
	}
	if snap.Change() != "policy replaced (0 rules)" {
		t.Errorf("Replace's Change = %q, want %q", snap.Change(), "policy replaced (0 rules)")
	}

	snap, err = s.Reload(Spec{Default: Block, Rules: []Rule{{Host: "d.test", Action: Allow}}}, "policy reloaded from p.yaml on SIGHUP")
	if err != nil {
		t.Fatal(err)
	}
	if want := "policy reloaded from p.yaml on SIGHUP (1 rules)"; snap.Version() != 7 || snap.Change() != want || ruleIDs(snap.Policy())[0] != "r4" {
		t.Errorf("Reload = version %d, change %q, ids %v; want version 7, %q, r4", snap.Version(), snap.Change(), ruleIDs(snap.Policy()), want)
	}
}

func TestStoreFailedUpdatesChangeNothing(t *testing.T) {
	s := newTestStore(t)
	before := s.Load()
	failures := []struct {
		name string
		do   func() error
		is   error
	}{
		{"invalid replace", func() error { _, err := s.Replace(Spec{Rules: []Rule{{Host: "*.", Action: Allow}}}, 0); return err }, ErrInvalidRule},
		{"stale replace", func() error { _, err := s.Replace(Spec{}, 7); return err }, ErrVersionMismatch},
		{"invalid reload", func() error {
			_, err := s.Reload(Spec{Rules: []Rule{{Host: "*.", Action: Allow}}}, "reloaded")
			return err
		}, ErrInvalidRule},
		{"invalid rule", func() error { _, _, err := s.AddRule(Rule{Host: "x.test", Action: "deny"}, 0, 0); return err }, ErrInvalidRule},
		{"duplicate id", func() error { _, _, err := s.AddRule(Rule{ID: "a", Host: "x.test", Action: Allow}, 0, 0); return err }, ErrInvalidRule},
		{"bad position", func() error { _, _, err := s.AddRule(Rule{Host: "x.test", Action: Allow}, 3, 0); return err }, ErrInvalidRule},
		{"negative position", func() error { _, _, err := s.AddRule(Rule{Host: "x.test", Action: Allow}, -2, 0); return err }, ErrInvalidRule},
		{"stale add", func() error { _, _, err := s.AddRule(Rule{Host: "x.test", Action: Allow}, 0, 2); return err }, ErrVersionMismatch},
		{"unknown id", func() error { _, err := s.RemoveRule("nope", 0); return err }, ErrRuleNotFound},
		{"stale remove", func() error { _, err := s.RemoveRule("a", 9); return err }, ErrVersionMismatch},
	}
	for _, f := range failures {
		err := f.do()
		if !errors.Is(err, f.is) {
			t.Errorf("%s: error = %v, want %v", f.name, err, f.is)
		}
		if after := s.Load(); after != before {
			t.Errorf("%s changed the store: version %d -> %d", f.name, before.Version(), after.Version())
		}
	}
}

// TestStoreReadersSeeWholeVersions swaps between two policies while readers
// decide: every snapshot a reader loads must pair a version with the policy
// made for it, and versions a reader sees never go back.
func TestStoreReadersSeeWholeVersions(t *testing.T) {
	allowSpec := Spec{Rules: []Rule{{ID: "x", Host: "x.test", Action: Allow}}}
	blockSpec := Spec{Rules: []Rule{{ID: "x", Host: "x.test", Action: Block}}}
	s := NewStore(mustCompile(t, Block, allowSpec.Rules...)) // version 1: allow
	const writes = 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for {
				select {
				case <-done:
					return
				default:
				}
				snap := s.Load()
				want := Allow // odd versions allow, even ones block
				if snap.Version()%2 == 0 {
					want = Block
				}
				if got := snap.Policy().Decide(connect("x.test", 443)).Action; got != want {
					t.Errorf("version %d decided %s, want %s", snap.Version(), got, want)
					return
				}
				if snap.Version() < last {
					t.Errorf("version went back from %d to %d", last, snap.Version())
					return
				}
				last = snap.Version()
			}
		}()
	}
	for i := range writes {
		spec := blockSpec
		if i%2 == 1 {
			spec = allowSpec
		}
		if _, err := s.Replace(spec, 0); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if v := s.Load().Version(); v != writes+1 {
		t.Errorf("final version = %d, want %d", v, writes+1)
	}
}

func TestStoreConcurrentWritersLoseNothing(t *testing.T) {
	s := NewStore(mustCompile(t, Block))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, _, err := s.AddRule(Rule{Host: "x.test", Action: Allow}, -1, 0); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	snap := s.Load()
	if n := len(snap.Policy().Rules()); n != 400 || snap.Version() != 401 {
		t.Errorf("after 400 concurrent adds: %d rules, version %d; want 400, 401", n, snap.Version())
	}
}

// TestStoreOnChange: the hook sees each new version before Load can return
// it, and nothing of a failed change.
func TestStoreOnChange(t *testing.T) {
	p, err := Compile(Spec{})
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(p)
	var seen []uint64
	s.OnChange(func(next *Snapshot) {
		if s.Load().Version() >= next.Version() {
			t.Errorf("version %d was visible before the hook saw it", next.Version())
		}
		seen = append(seen, next.Version())
	})
	if _, _, err := s.AddRule(Rule{Host: "a.test", Action: Allow}, -1, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AddRule(Rule{Host: "*.", Action: Allow}, -1, 0); err == nil {
		t.Fatal("an invalid rule was added")
	}
	if _, err := s.RemoveRule("r1", 5); err == nil {
		t.Fatal("a stale version was accepted")
	}
	if _, err := s.RemoveRule("r1", 0); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != 2 || seen[1] != 3 {
		t.Errorf("the hook saw versions %v, want [2 3]", seen)
	}
}

// TestStoreCheck shows AddCheck's refusal: a policy the check refuses is
// not swapped in, by any kind of change, and the check's error is what the
// change returns.
func TestStoreCheck(t *testing.T) {
	s := newTestStore(t)
	refused := errors.New("needs script x.yaml")
	if err := s.AddCheck(func(p *Policy) error {
		if slices.Contains(p.LLMScripts(), "x.yaml") {
			return refused
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Checks add up: a second one does not lift the first.
	if err := s.AddCheck(func(*Policy) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// A check the current policy fails is not added.
	if err := s.AddCheck(func(*Policy) error { return refused }); !errors.Is(err, refused) {
		t.Errorf("AddCheck of a check the current policy fails: error = %v, want the check's", err)
	}
	llm := Rule{Host: "llm.test", Action: Intercept, Response: &Response{LLM: "x.yaml"}}
	before := s.Load()
	if _, _, err := s.AddRule(llm, 0, 0); !errors.Is(err, refused) {
		t.Errorf("AddRule: error = %v, want the check's", err)
	}
	spec := before.Policy().Spec()
	spec.Rules = append(spec.Rules, llm)
	if _, err := s.Replace(spec, 0); !errors.Is(err, refused) {
		t.Errorf("Replace: error = %v, want the check's", err)
	}
	if s.Load() != before {
		t.Fatalf("a refused change was swapped in: version %d -> %d", before.Version(), s.Load().Version())
	}
	llm.Response.LLM = "y.yaml"
	snap, added, err := s.AddRule(llm, 0, 0)
	if err != nil {
		t.Fatalf("a policy the check lets through was refused: %v", err)
	}
	if got := snap.Policy().LLMScripts(); !slices.Equal(got, []string{"y.yaml"}) {
		t.Errorf("LLMScripts = %q, want [y.yaml]", got)
	}
	if d := snap.Policy().Decide(Target{Host: "llm.test", Port: 80, Method: "POST", Path: "/v1/messages"}); d.Action != Intercept || d.Rule != added.ID || d.Response == nil || d.Response.LLM != "y.yaml" {
		t.Errorf("Decide = %+v, want an intercept by %s answered by y.yaml", d, added.ID)
	}
}

// TestLLMScripts: the names of a policy's llm responses, cleaned, each
// once, sorted.
func TestLLMScripts(t *testing.T) {
	p, err := Parse("p.yaml", []byte(`rules:
  - {host: a.test, action: intercept, response: {llm: ./b.yaml}}
  - {host: b.test, action: intercept, response: {llm: b.yaml}}
  - {host: c.test, action: intercept, response: {llm: dir/../a.yaml}}
  - {host: d.test, action: intercept, response: {status: 204}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.LLMScripts(); !slices.Equal(got, []string{"a.yaml", "b.yaml"}) {
		t.Errorf("LLMScripts = %q, want [a.yaml b.yaml]", got)
	}
}
