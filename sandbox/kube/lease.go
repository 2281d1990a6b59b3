package kube

import (
	"context"
	"errors"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Elector elects one leader among the processes that share a Lease
// (coordination.k8s.io/v1), with the semantics of client-go's
// tools/leaderelection and its LeaseLock: the holder renews the Lease's
// renewTime every RetryPeriod; another process takes it only once it has
// seen the Lease unchanged for leaseDurationSeconds by its own clock (so
// the clocks of the two need not agree), and every write is an update of
// the version read (the API server's optimistic concurrency on
// resourceVersion), so of two that try at once one wins. client-go's
// package is not used because its resourcelock imports the typed
// clientsets and their scheme of every API group, which sbx keeps out of
// its binary (docs/performance.md).
type Elector struct {
	Leases   ResourceClient[*coordinationv1.Lease, *coordinationv1.LeaseList]
	Name     string // the Lease's name
	Identity string // this process's, unique among those that share the Lease
	// LeaseDuration is how long the others wait, from when they last saw
	// the Lease change, before they take it; RenewDeadline how long the
	// holder tries to renew it before it gives up leading; RetryPeriod
	// how often each tries. Zero: client-go's usual 15 s, 10 s, 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	observed     coordinationv1.LeaseSpec
	observedTime time.Time
}

// ErrLeaseLost is Run's error when the leader could not renew its Lease
// within RenewDeadline: another may lead now.
var ErrLeaseLost = errors.New("the leader's Lease was not renewed in time")

func (e *Elector) durations() (lease, renew, retry time.Duration) {
	lease, renew, retry = e.LeaseDuration, e.RenewDeadline, e.RetryPeriod
	if lease == 0 {
		lease = 15 * time.Second
	}
	if renew == 0 {
		renew = 10 * time.Second
	}
	if retry == 0 {
		retry = 2 * time.Second
	}
	return lease, renew, retry
}

// Run waits until this process holds the Lease, then calls lead with a
// context that ends when ctx does or when the Lease could not be renewed
// within RenewDeadline, and returns once lead has returned: ErrLeaseLost
// when the Lease was lost, else ctx's error, after giving the Lease up
// (an empty holder) so that another takes it at once.
func (e *Elector) Run(ctx context.Context, lead func(context.Context)) error {
	_, renewDeadline, retry := e.durations()
	for !e.try(ctx) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
	}
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	// Ends when lead returns, which it does once leadCtx ends.
	go func() {
		defer close(done)
		lead(leadCtx)
	}()
	renewed := time.Now()
	lost := false
	for !lost {
		select {
		case <-ctx.Done():
		case <-done:
		case <-time.After(retry):
			if e.try(ctx) {
				renewed = time.Now()
			} else if time.Since(renewed) > renewDeadline {
				lost = true
			}
			continue
		}
		break
	}
	cancel()
	<-done
	if lost {
		return ErrLeaseLost
	}
	e.release(context.WithoutCancel(ctx))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// try takes or renews the Lease, and says whether this process holds it.
func (e *Elector) try(ctx context.Context) bool {
	leaseDuration, _, retry := e.durations()
	ctx, cancel := context.WithTimeout(ctx, retry+5*time.Second)
	defer cancel()
	now := time.Now()
	mnow := metav1.NewMicroTime(now)
	seconds := int32(leaseDuration / time.Second)
	lease, err := e.Leases.Get(ctx, e.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: e.Name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: &e.Identity, LeaseDurationSeconds: &seconds,
				AcquireTime: &mnow, RenewTime: &mnow, LeaseTransitions: new(int32),
			},
		}
		made, err := e.Leases.Create(ctx, lease, metav1.CreateOptions{FieldManager: "sbx"})
		if err != nil {
			return false
		}
		e.observed, e.observedTime = made.Spec, now
		return true
	}
	if err != nil {
		return false
	}
	if !apiequality.Semantic.DeepEqual(lease.Spec, e.observed) {
		e.observed, e.observedTime = *lease.Spec.DeepCopy(), now
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	held := time.Duration(0)
	if lease.Spec.LeaseDurationSeconds != nil {
		held = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	if holder != "" && holder != e.Identity && e.observedTime.Add(held).After(now) {
		return false // another holds it, and renewed it lately
	}
	spec := lease.Spec.DeepCopy()
	if holder != e.Identity {
		spec.AcquireTime = &mnow
		transitions := int32(0)
		if spec.LeaseTransitions != nil {
			transitions = *spec.LeaseTransitions
		}
		if holder != "" {
			transitions++
		}
		spec.LeaseTransitions = &transitions
	}
	spec.HolderIdentity, spec.LeaseDurationSeconds, spec.RenewTime = &e.Identity, &seconds, &mnow
	lease.Spec = *spec
	// lease carries the resourceVersion read: an update by another
	// since then makes this one fail (409 Conflict).
	updated, err := e.Leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: "sbx"})
	if err != nil {
		return false
	}
	e.observed, e.observedTime = updated.Spec, now
	return true
}

// release gives the Lease up if this process holds it: an empty holder,
// which the others take at once.
func (e *Elector) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lease, err := e.Leases.Get(ctx, e.Name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != e.Identity {
		return
	}
	empty, one, now := "", int32(1), metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &empty, &one, &now
	e.Leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: "sbx"})
}
