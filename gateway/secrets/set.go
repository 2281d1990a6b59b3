package secrets

import (
	"errors"
	"fmt"
	"sync"

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
// It is safe for concurrent use.
type Set struct {
	secrets []*Secret

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
	set := &Set{secrets: secrets}
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
	return s.secrets
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
	s.scrubOnce.Do(func() {
		secs := make([]secretscrub.Secret, len(s.secrets))
		for i, sec := range s.secrets {
			secs[i] = secretscrub.Secret{Name: sec.name, Value: sec.value, Placeholder: sec.placeholder}
		}
		s.scrubber = secretscrub.New(secs)
	})
	return s.scrubber
}
