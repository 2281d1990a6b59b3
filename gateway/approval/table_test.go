package approval

import (
	"sync"
	"testing"
	"time"
)

// A question whose deadline passes while an answer is carried out is
// left to that answer; when the answer fails, it times out at once.
func TestApprovalsTimeoutWhileClaimed(t *testing.T) {
	var mu sync.Mutex
	var logged []Answer
	r := newTable(10, func(_ Approval, a Answer) {
		mu.Lock()
		logged = append(logged, a)
		mu.Unlock()
	})
	for _, fail := range []bool{false, true} {
		q, _, err := r.join(Approval{Host: "h.example", Port: 443, Asked: time.Now()}, "", 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.claim(q.ID, ByCLI); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // past the deadline
		select {
		case <-q.done:
			t.Fatalf("fail %v: the question timed out while it was being answered", fail)
		default:
		}
		want := Answer{Allow: true, Scope: ScopeOnce, By: ByCLI}
		if fail {
			r.unclaim(q.ID)
			want = timeoutAnswer
		} else if _, err := r.answer(q.ID, want); err != nil {
			t.Fatal(err)
		}
		select {
		case <-q.done:
		case <-time.After(5 * time.Second):
			t.Fatalf("fail %v: the question never ended", fail)
		}
		if q.answer != want {
			t.Errorf("fail %v: got answer %+v, want %+v", fail, q.answer, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 2 {
		t.Errorf("logged answers: got %+v, want 2", logged)
	}
}
