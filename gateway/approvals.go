package gateway

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sbx-dev/sbx/gateway/api"
)

// Scope says how far an answer to a question reaches (docs/gateway.md).
type Scope string

// The scopes of an answer (api.Scopes).
const (
	// ScopeOnce answers the requests held now, and nothing later.
	ScopeOnce Scope = api.ScopeOnce
	// ScopeSession also adds a rule for the host and port to the running
	// policy, for the rest of the sandbox's life.
	ScopeSession Scope = api.ScopeSession
	// ScopeAlways also writes that rule to the run's approvals file
	// (Config.ApprovalsFile), so that later runs are not asked.
	ScopeAlways Scope = api.ScopeAlways
)

// Who answered a question: the by field of the decision log's approval
// records. The answerers are api.Answerers; the gateway's own word is
// ByTimeout, for a question no one answered.
const (
	ByTTY     = api.ByTTY // the prompt on sbx run's terminal
	ByCLI     = api.ByCLI // sbx approve, sbx deny
	ByAPI     = api.ByAPI // POST /v1/approvals/{id}
	ByUI      = api.ByUI  // sbx ui
	ByTimeout = "timeout" // no answer came in time: a deny
)

// Answer is a person's answer to a question: allow or deny, how far it
// reaches, and who gave it (ByCLI, ...).
type Answer struct {
	Allow bool
	Scope Scope
	By    string
}

// Approval is a pending question, as the management API lists it: the
// first held request's target, the rule that asked (a rule id, or
// netpolicy.RuleDefault) and why, when it was asked and times out, and how
// many requests wait on it.
type Approval = api.Approval

// Errors of answering a question, for errors.Is.
var (
	// ErrApprovalNotFound: no pending question has the id (answered
	// already, timed out, or never asked).
	ErrApprovalNotFound = api.ErrApprovalNotFound
	// ErrTooManyApprovals: the gateway holds MaxPendingApprovals questions
	// already; a new one is not asked, and its request is blocked.
	ErrTooManyApprovals = errors.New("too many pending approvals")
	// ErrNoApprovalsFile: an always answer, but the gateway has no file
	// to write rules to (Config.ApprovalsFile).
	ErrNoApprovalsFile = api.ErrNoApprovalsFile
	// ErrInvalidAnswer: an answer with an unknown scope or no answerer.
	ErrInvalidAnswer = api.ErrInvalidAnswer
)

// MaxPendingApprovals bounds the questions a gateway holds at once, and so
// the memory they take: each is a few hundred bytes and a timer, and the
// requests waiting on it are connections the gateway's limits bound.
const MaxPendingApprovals = 4096

// approvalKey is what a question is about: requests to one host and port
// wait on one question.
type approvalKey struct {
	host string
	port uint16
}

// question is one pending question. Its Approval is guarded by the
// registry's lock; answer is written once, before done is closed, and
// read only after done is closed.
type question struct {
	Approval
	done   chan struct{}
	answer Answer
	timer  *time.Timer
}

// approvals is the registry of pending questions: one per host and port,
// found by key or by id. A held request waits on its question's done
// channel, which costs no CPU; the question ends when it is answered
// (resolve) or when its timer fires, which calls expire. It is safe for
// concurrent use; the zero value is not: make one with newApprovals.
type approvals struct {
	mu    sync.Mutex
	byKey map[approvalKey]*question
	byID  map[string]*question
	seq   uint64
	max   int
	// expire is called with a question's id on its timer's goroutine
	// when its deadline passes; it must resolve the question.
	expire func(id string)
}

// newApprovals returns an empty registry of at most max questions, whose
// timed-out questions are passed to expire.
func newApprovals(max int, expire func(id string)) *approvals {
	return &approvals{byKey: map[approvalKey]*question{}, byID: map[string]*question{}, max: max, expire: expire}
}

// join returns the pending question about info's host and port, counting
// one more waiter on it, or asks a new one (created true) that times out
// after timeout. Over the registry's bound it returns ErrTooManyApprovals.
// Every join must be followed by leave, unless the question's done
// channel was closed first.
func (r *approvals) join(info Approval, timeout time.Duration) (q *question, created bool, err error) {
	key := approvalKey{info.Host, info.Port}
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.byKey[key]; q != nil {
		q.Waiting++
		return q, false, nil
	}
	if len(r.byID) >= r.max {
		return nil, false, ErrTooManyApprovals
	}
	r.seq++
	q = &question{Approval: info, done: make(chan struct{})}
	q.ID = "a" + strconv.FormatUint(r.seq, 10)
	q.Deadline = info.Asked.Add(timeout)
	q.Waiting = 1
	r.byKey[key], r.byID[q.ID] = q, q
	id := q.ID
	q.timer = time.AfterFunc(timeout, func() { r.expire(id) })
	return q, true, nil
}

// leave counts a waiter that gave up on q before its answer (its client
// went away, the gateway closed). The question stays until answered or
// timed out: other requests may join it.
func (r *approvals) leave(q *question) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q.Waiting > 0 {
		q.Waiting--
	}
}

// get returns the pending question id, or false.
func (r *approvals) get(id string) (Approval, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.byID[id]
	if q == nil {
		return Approval{}, false
	}
	return q.Approval, true
}

// resolve ends the pending question id with a: it is removed, its timer
// stopped, logged is called with it (when not nil: the answer is logged
// before any request it wakes is), and every request waiting on it woken.
// It returns the question as it stood, or ErrApprovalNotFound when it is
// not pending (answered or timed out already: the first answer wins).
func (r *approvals) resolve(id string, a Answer, logged func(Approval)) (Approval, error) {
	r.mu.Lock()
	q := r.byID[id]
	if q == nil {
		r.mu.Unlock()
		return Approval{}, ErrApprovalNotFound
	}
	delete(r.byID, id)
	delete(r.byKey, approvalKey{q.Host, q.Port})
	info := q.Approval
	r.mu.Unlock()
	q.timer.Stop()
	if logged != nil {
		logged(info)
	}
	q.answer = a
	close(q.done)
	return info, nil
}

// list returns the pending questions, oldest first.
func (r *approvals) list() []Approval {
	r.mu.Lock()
	out := make([]Approval, 0, len(r.byID))
	for _, q := range r.byID {
		out = append(out, q.Approval)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Approval) int {
		if c := a.Asked.Compare(b.Asked); c != 0 {
			return c
		}
		return compareIDs(a.ID, b.ID)
	})
	return out
}

// compareIDs orders question ids "a<n>" by n.
func compareIDs(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
