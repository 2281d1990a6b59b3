package secrets

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sbx-dev/sbx/gateway/secretscrub"
	"github.com/sbx-dev/sbx/netpolicy"
)

// ErrFixed is a policy change that would change the policy's secrets:
// their values are read when the gateway starts, and only then.
var ErrFixed = errors.New("a policy's secrets are read when the gateway starts and cannot change while it runs; keep its secrets as they are")

// Set is the secrets of one gateway, and what it does with them: which
// hosts are bound (Bound), which requests carry a placeholder where its
// value is not sent (BlockLeak, PlaceholderIn, TrailerGuard), the values
// put in (Inject, WithValues, Injector), taken out of error text
// (Redact) and out of answers (ScrubberFor). A nil Set holds no secrets.
// It is safe for concurrent use; Rotate changes a value while it is used.
type Set struct {
	cur atomic.Pointer[setState]

	mu sync.Mutex // serializes Rotate
}

// setState is a Set's secrets at one time: Rotate makes a new one (each
// Secret is never changed once made, so a request that took the state
// keeps a consistent view).
type setState struct {
	secrets []*Secret
	retired []secretscrub.Secret // values Rotate replaced: still scrubbed and redacted

	scrubOnce sync.Once
	scrubber  *secretscrub.Scrubber // made on first use
}

// NewSet returns the Set of secrets, each made by New, FromSpec or Read,
// each name once. When store is not nil, the policy's secrets stay as
// store holds them now: a later policy that changes them is refused with
// ErrFixed.
func NewSet(secrets []*Secret, store *netpolicy.Store) (*Set, error) {
	seen := map[string]bool{}
	for _, sec := range secrets {
		if sec == nil || sec.placeholder == "" {
			return nil, errors.New("holds a secret not made by secrets.New")
		}
		if seen[sec.name] {
			return nil, fmt.Errorf("holds secret %s twice", sec.name)
		}
		seen[sec.name] = true
	}
	set := &Set{}
	set.cur.Store(&setState{secrets: secrets})
	if store == nil {
		return set, nil
	}
	start := store.Load().Policy().Secrets()
	err := store.AddCheck(func(p *netpolicy.Policy) error {
		if !netpolicy.SameSecrets(start, p.Secrets()) {
			return ErrFixed
		}
		return nil
	})
	return set, err
}

// list is the set's secrets; none for a nil Set.
func (s *Set) list() []*Secret {
	if s == nil {
		return nil
	}
	return s.cur.Load().secrets
}

// retired is the values Rotate replaced; none for a nil Set.
func (s *Set) retired() []secretscrub.Secret {
	if s == nil {
		return nil
	}
	return s.cur.Load().retired
}

// Rotate gives the secret name a new value, its placeholder kept, for
// the requests that start after it returns: a login whose token was
// refreshed (gateway/login). The old value stays among what is scrubbed
// from bound hosts' answers and redacted from errors. A value FromSpec
// would refuse is an *Error wrapping ErrEmpty or ErrValue; a name the
// Set does not hold is an error.
func (s *Set) Rotate(name, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cur.Load()
	value = strings.TrimSpace(value)
	switch {
	case value == "":
		return &Error{Name: name, Err: ErrEmpty}
	case !valueSafe(value):
		return &Error{Name: name, Err: ErrValue}
	}
	next := &setState{secrets: make([]*Secret, len(old.secrets)), retired: old.retired}
	found := false
	for i, sec := range old.secrets {
		next.secrets[i] = sec
		if sec.name != name {
			continue
		}
		found = true
		if sec.value == value {
			continue
		}
		next.retired = append(next.retired, secretscrub.Secret{Name: sec.name, Value: sec.value, Placeholder: sec.placeholder})
		c := *sec
		q := strconv.Quote(value)
		c.value, c.quoted = value, q[1:len(q)-1]
		next.secrets[i] = &c
	}
	if !found {
		return fmt.Errorf("secret %s: not in the set", name)
	}
	s.cur.Store(next)
	return nil
}

// Bound reports whether some secret's value is sent to host
// (normalized) on port: such a host is inspected, so that its requests'
// headers can be rewritten, and its answers are scrubbed.
func (s *Set) Bound(host string, port uint16) bool {
	for _, sec := range s.list() {
		if sec.bound(host, port) {
			return true
		}
	}
	return false
}

// ScrubberFor returns the scrubber of what host (normalized) on port
// answers: every secret's value, when some secret is bound there (a
// host that is sent a value may echo it, now or in a later answer); nil
// when none is.
func (s *Set) ScrubberFor(host string, port uint16) *secretscrub.Scrubber {
	if !s.Bound(host, port) {
		return nil
	}
	st := s.cur.Load()
	st.scrubOnce.Do(func() {
		secs := make([]secretscrub.Secret, len(st.secrets), len(st.secrets)+len(st.retired))
		for i, sec := range st.secrets {
			secs[i] = secretscrub.Secret{Name: sec.name, Value: sec.value, Placeholder: sec.placeholder}
		}
		st.scrubber = secretscrub.New(append(secs, st.retired...))
	})
	return st.scrubber
}
