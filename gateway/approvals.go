package gateway

import (
	"errors"
	"fmt"
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
	// ScopeSession also adds a rule for the question's host and port, and
	// its method and path when it has them, to the running policy, for
	// the rest of the sandbox's life.
	ScopeSession Scope = api.ScopeSession
	// ScopeAlways also writes that rule to the run's approvals file
	// (Config.ApprovalsFile), so that later runs are not asked.
	ScopeAlways Scope = api.ScopeAlways
)

// Who answered a question: the by field of the decision log's approval
// records. The answerers are api.Answerers; the gateway's own words, for
// a question no one answered, are ByTimeout and ByClosed.
const (
	ByTTY     = api.ByTTY // the prompt on sbx run's terminal
	ByCLI     = api.ByCLI // sbx approve, sbx deny
	ByAPI     = api.ByAPI // POST /v1/approvals/{id}
	ByUI      = api.ByUI  // sbx ui
	ByTimeout = "timeout" // no answer came in time: a deny
	ByClosed  = "closed"  // the gateway closed before an answer came: a deny
)

// Answer is a person's answer to a question: allow or deny, how far it
// reaches, and who gave it (ByCLI, ...).
type Answer struct {
	Allow bool
	Scope Scope
	By    string
}

// Approval is a pending question, as the management API lists it: the
// target, method and path every request held on it shows, the rule that
// asked (a rule id, or netpolicy.RuleDefault) and why, when it was asked
// and times out, and how many requests wait on it.
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
	// ErrApprovalAnswered: another answer to the question came first,
	// and is being carried out or was; the error says by whom.
	ErrApprovalAnswered = api.ErrApprovalAnswered
)

// MaxPendingApprovals bounds the requests a gateway holds at once for an
// answer, and so the questions (each is a few hundred bytes and a timer)
// and the memory they take: every held request counts, a proxied
// request, a tunnel, a captured connection and each HTTP/2 stream of an
// inspected connection alike (one connection carries many streams, which
// the per-client connection limit does not bound).
const MaxPendingApprovals = 4096

// approvalKey is what a question is about: requests to one host and port
// with one method and path (as sent, the query left out; both empty for a
// tunnel or captured connection) wait on one question, so that an answer
// releases only requests that show what the question shows.
type approvalKey struct {
	host   string
	port   uint16
	method string
	path   string
}

// question is one pending question. Its Approval, by and expired are
// guarded by the registry's lock; answer is written once, before done is
// closed, and read only after done is closed.
type question struct {
	Approval
	key    approvalKey
	done   chan struct{}
	answer Answer
	timer  *time.Timer
	// by is who is answering it (claim), "" while no one is; expired says
	// its deadline passed meanwhile, so that it times out if that answer
	// fails.
	by      string
	expired bool
}

// errApprovalsClosed is join's error once the registry is closed: the
// gateway is closing, and asks nothing more.
var errApprovalsClosed = errors.New("the gateway is closing")

// approvals is the registry of pending questions: one per host and port,
// found by key or by id. A held request waits on its question's done
// channel, which costs no CPU. A question ends once: answered (claim,
// then answer), timed out when its timer fires, or ended by close; its
// answer is logged (the logged func) before the requests waiting on it
// wake. It is safe for concurrent use; the zero value is not: make one
// with newApprovals.
type approvals struct {
	mu    sync.Mutex
	byKey map[approvalKey]*question
	byID  map[string]*question
	seq   uint64
	// max bounds held, the requests waiting on the questions.
	max    int
	held   int
	closed bool
	// ending counts the questions taken out of the maps whose answer is
	// not yet logged, so that close returns only once every answer is.
	ending sync.WaitGroup
	// logged is called with each question as it stood when it ended and
	// its answer, before its requests wake; nil logs nothing.
	logged func(Approval, Answer)
}

// newApprovals returns an empty registry holding at most max requests, whose
// answers (timeouts included) are passed to logged.
func newApprovals(max int, logged func(Approval, Answer)) *approvals {
	return &approvals{byKey: map[approvalKey]*question{}, byID: map[string]*question{}, max: max, logged: logged}
}

// timeoutAnswer is the answer of a question whose deadline passed.
var timeoutAnswer = Answer{Scope: ScopeOnce, By: ByTimeout}

// join returns the pending question about info's host and port and
// path's method and path (path is the request's whole path; info's may be
// cut for the log), counting one more waiter on it, or asks a new one
// (created true) that times out after timeout. When the registry holds its
// bound of requests it returns ErrTooManyApprovals, and once it is closed
// errApprovalsClosed. Every join must be followed by leave, unless the
// question's done channel was closed first.
func (r *approvals) join(info Approval, path string, timeout time.Duration) (q *question, created bool, err error) {
	key := approvalKey{info.Host, info.Port, info.Method, path}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, false, errApprovalsClosed
	}
	if r.held >= r.max {
		return nil, false, ErrTooManyApprovals
	}
	if q := r.byKey[key]; q != nil {
		q.Waiting++
		r.held++
		return q, false, nil
	}
	r.seq++
	r.held++
	q = &question{Approval: info, key: key, done: make(chan struct{})}
	q.ID = "a" + strconv.FormatUint(r.seq, 10)
	q.Deadline = info.Asked.Add(timeout)
	q.Waiting = 1
	r.byKey[key], r.byID[q.ID] = q, q
	id := q.ID
	q.timer = time.AfterFunc(timeout, func() { r.timeout(id) })
	return q, true, nil
}

// leave counts a waiter that gave up on q before its answer (its client
// went away). The question stays until answered or timed out: other
// requests may join it.
func (r *approvals) leave(q *question) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[q.ID] == q && q.Waiting > 0 { // once it ended, take counted it
		q.Waiting--
		r.held--
	}
}

// get returns the pending question id, or false.
func (r *approvals) get(id string) (Approval, bool) {
	a, _, ok := r.getKey(id)
	return a, ok
}

// getKey returns the pending question id and what it is about, or false.
func (r *approvals) getKey(id string) (Approval, approvalKey, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.byID[id]
	if q == nil {
		return Approval{}, approvalKey{}, false
	}
	return q.Approval, q.key, true
}

// claim makes by the one answering the pending question id, before the
// answer has any effect, and returns the question: only one answer gets
// past claim. Its claimer must then call answer, or unclaim when the
// answer failed. Errors: ErrApprovalNotFound when id is not pending,
// ErrApprovalAnswered when another answer claimed it first (the error
// says by whom).
func (r *approvals) claim(id, by string) (Approval, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.byID[id]
	switch {
	case q == nil:
		return Approval{}, ErrApprovalNotFound
	case q.by != "":
		return Approval{}, fmt.Errorf("question %q is %w (by %s); that answer stands: GET /v1/approvals lists the pending questions", id, ErrApprovalAnswered, q.by)
	}
	q.by = by
	return q.Approval, nil
}

// unclaim gives up the claim on question id, whose answer failed: it is
// pending again, or, when its deadline passed meanwhile, times out now.
func (r *approvals) unclaim(id string) {
	r.mu.Lock()
	q := r.byID[id]
	if q == nil {
		r.mu.Unlock()
		return
	}
	q.by = ""
	if !q.expired {
		r.mu.Unlock()
		return
	}
	info := r.takeLocked(q)
	r.mu.Unlock()
	r.finish(q, info, timeoutAnswer)
}

// answer ends the claimed question id with a: it is removed, its timer
// stopped, its answer logged and every request waiting on it woken. It
// returns the question as it stood, or ErrApprovalNotFound when it ended
// meanwhile (the registry was closed).
func (r *approvals) answer(id string, a Answer) (Approval, error) {
	r.mu.Lock()
	q := r.byID[id]
	if q == nil {
		r.mu.Unlock()
		return Approval{}, ErrApprovalNotFound
	}
	info := r.takeLocked(q)
	r.mu.Unlock()
	r.finish(q, info, a)
	return info, nil
}

// resolve claims question id for a.By and answers it with a.
func (r *approvals) resolve(id string, a Answer) (Approval, error) {
	if _, err := r.claim(id, a.By); err != nil {
		return Approval{}, err
	}
	return r.answer(id, a)
}

// timeout ends question id, whose deadline passed, with a deny by
// timeout; one being answered is left to its answer (see unclaim).
func (r *approvals) timeout(id string) {
	r.mu.Lock()
	q := r.byID[id]
	if q == nil {
		r.mu.Unlock()
		return
	}
	if q.by != "" {
		q.expired = true
		r.mu.Unlock()
		return
	}
	info := r.takeLocked(q)
	r.mu.Unlock()
	r.finish(q, info, timeoutAnswer)
}

// close ends every pending question with a, claimed or not, oldest
// first, and refuses new ones (join). It returns once every question
// that ended, here or elsewhere, has had its answer logged, and stops
// their timers: nothing is logged after it.
func (r *approvals) close(a Answer) {
	r.mu.Lock()
	r.closed = true
	qs := make([]*question, 0, len(r.byID))
	infos := make(map[*question]Approval, len(r.byID))
	for _, q := range r.byID {
		qs = append(qs, q)
		infos[q] = r.takeLocked(q)
	}
	r.mu.Unlock()
	slices.SortFunc(qs, func(x, y *question) int { return compareIDs(x.ID, y.ID) })
	for _, q := range qs {
		r.finish(q, infos[q], a)
	}
	r.ending.Wait()
}

// takeLocked removes q from the maps and returns it as it stood; its
// taker must call finish. r.mu is held.
func (r *approvals) takeLocked(q *question) Approval {
	delete(r.byID, q.ID)
	delete(r.byKey, q.key)
	r.held -= q.Waiting // they wake, and wait no more
	r.ending.Add(1)
	return q.Approval
}

// finish ends q, taken out as info, with a: its timer stopped, a logged,
// and its requests woken.
func (r *approvals) finish(q *question, info Approval, a Answer) {
	defer r.ending.Done()
	q.timer.Stop()
	if r.logged != nil {
		r.logged(info, a)
	}
	q.answer = a
	close(q.done)
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
