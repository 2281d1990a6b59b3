package approval

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// questionKey is what a question is about: requests to one host and port
// with one method and path (as sent, the query left out; both empty for a
// tunnel or captured connection) wait on one question, so that an answer
// releases only requests that show what the question shows.
type questionKey struct {
	host   string
	port   uint16
	method string
	path   string
}

// question is one pending question. Its Approval, by and expired are
// guarded by the table's lock; answer is written once, before done is
// closed, and read only after done is closed.
type question struct {
	Approval
	key    questionKey
	done   chan struct{}
	answer Answer
	timer  *time.Timer
	// by is who is answering it (claim), "" while no one is; expired says
	// its deadline passed meanwhile, so that it times out if that answer
	// fails.
	by      string
	expired bool
}

// errClosed is join's error once the table is closed: the
// gateway is closing, and asks nothing more.
var errClosed = errors.New("the gateway is closing")

// table is the table of pending questions: one per host and port,
// found by key or by id. A held request waits on its question's done
// channel, which costs no CPU. A question ends once: answered (claim,
// then answer), timed out when its timer fires, or ended by close; its
// answer is logged (the logged func) before the requests waiting on it
// wake. It is safe for concurrent use; the zero value is not: make one
// with newTable.
type table struct {
	mu    sync.Mutex
	byKey map[questionKey]*question
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

// newTable returns an empty table holding at most max requests, whose
// answers (timeouts included) are passed to logged.
func newTable(max int, logged func(Approval, Answer)) *table {
	return &table{byKey: map[questionKey]*question{}, byID: map[string]*question{}, max: max, logged: logged}
}

// timeoutAnswer is the answer of a question whose deadline passed.
var timeoutAnswer = Answer{Scope: ScopeOnce, By: ByTimeout}

// join returns the pending question about info's host and port and
// path's method and path (path is the request's whole path; info's may be
// cut for the log), counting one more waiter on it, or asks a new one
// (created true) that times out after timeout. When the table holds its
// bound of requests it returns ErrTooMany, and once it is closed
// errClosed. Every join must be followed by leave, unless the
// question's done channel was closed first.
func (r *table) join(info Approval, path string, timeout time.Duration) (q *question, created bool, err error) {
	key := questionKey{info.Host, info.Port, info.Method, path}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, false, errClosed
	}
	if r.held >= r.max {
		return nil, false, ErrTooMany
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
func (r *table) leave(q *question) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[q.ID] == q && q.Waiting > 0 { // once it ended, take counted it
		q.Waiting--
		r.held--
	}
}

// get returns the pending question id, or false.
func (r *table) get(id string) (Approval, bool) {
	a, _, ok := r.getKey(id)
	return a, ok
}

// getKey returns the pending question id and what it is about, or false.
func (r *table) getKey(id string) (Approval, questionKey, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.byID[id]
	if q == nil {
		return Approval{}, questionKey{}, false
	}
	return q.Approval, q.key, true
}

// claim makes by the one answering the pending question id, before the
// answer has any effect, and returns the question: only one answer gets
// past claim. Its claimer must then call answer, or unclaim when the
// answer failed. Errors: ErrNotFound when id is not pending,
// ErrAnswered when another answer claimed it first (the error
// says by whom).
func (r *table) claim(id, by string) (Approval, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.byID[id]
	switch {
	case q == nil:
		return Approval{}, ErrNotFound
	case q.by != "":
		return Approval{}, fmt.Errorf("question %q is %w (by %s); that answer stands: GET /v1/approvals lists the pending questions", id, ErrAnswered, q.by)
	}
	q.by = by
	return q.Approval, nil
}

// unclaim gives up the claim on question id, whose answer failed: it is
// pending again, or, when its deadline passed meanwhile, times out now.
func (r *table) unclaim(id string) {
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
// returns the question as it stood, or ErrNotFound when it ended
// meanwhile (the table was closed).
func (r *table) answer(id string, a Answer) (Approval, error) {
	r.mu.Lock()
	q := r.byID[id]
	if q == nil {
		r.mu.Unlock()
		return Approval{}, ErrNotFound
	}
	info := r.takeLocked(q)
	r.mu.Unlock()
	r.finish(q, info, a)
	return info, nil
}

// resolve claims question id for a.By and answers it with a.
func (r *table) resolve(id string, a Answer) (Approval, error) {
	if _, err := r.claim(id, a.By); err != nil {
		return Approval{}, err
	}
	return r.answer(id, a)
}

// timeout ends question id, whose deadline passed, with a deny by
// timeout; one being answered is left to its answer (see unclaim).
func (r *table) timeout(id string) {
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
func (r *table) close(a Answer) {
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
func (r *table) takeLocked(q *question) Approval {
	delete(r.byID, q.ID)
	delete(r.byKey, q.key)
	r.held -= q.Waiting // they wake, and wait no more
	r.ending.Add(1)
	return q.Approval
}

// finish ends q, taken out as info, with a: its timer stopped, a logged,
// and its requests woken.
func (r *table) finish(q *question, info Approval, a Answer) {
	defer r.ending.Done()
	q.timer.Stop()
	if r.logged != nil {
		r.logged(info, a)
	}
	q.answer = a
	close(q.done)
}

// list returns the pending questions, oldest first.
func (r *table) list() []Approval {
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
