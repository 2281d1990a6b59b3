package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testCert returns a self-signed CA certificate (PEM) valid until end.
func testCert(t testing.TB, end time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: end.Add(-7 * 24 * time.Hour), NotAfter: end, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// testSandbox is the objects of a sandbox made at made, whose CA expires
// at caEnd: its ConfigMap, Secret, NetworkPolicies, gateway pod (running
// and ready) and agent pod (running).
type testSandbox struct {
	id      string
	objs    *Objects
	agent   *corev1.Pod
	caPEM   []byte
	certPEM []byte
}

func newTestSandbox(t testing.TB, id string, made, caEnd time.Time) *testSandbox {
	t.Helper()
	cert := testCert(t, caEnd)
	s := Spec{ID: id, Image: "agent:1", GatewayImage: "sbx:1", Policy: []byte("default: block\n"),
		CACert: cert, CA: append(append([]byte(nil), cert...), "KEY of "+id+"\n"...), Roots: []byte("ROOTS\n"), Token: "tok"}
	objs, err := MakeObjects(s)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := AgentPod(s, netip.MustParseAddr("10.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*metav1.ObjectMeta{&objs.ConfigMap.ObjectMeta, &objs.Secret.ObjectMeta, &objs.AgentPolicy.ObjectMeta, &objs.GatewayPolicy.ObjectMeta, &objs.Gateway.ObjectMeta, &agent.ObjectMeta} {
		m.CreationTimestamp = metav1.NewTime(made)
	}
	objs.Gateway.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	agent.Status = corev1.PodStatus{Phase: corev1.PodRunning}
	return &testSandbox{id: id, objs: objs, agent: agent, caPEM: s.CA, certPEM: cert}
}

// observed is the sandbox as the informers would show it.
func (s *testSandbox) observed() observed {
	return observed{id: s.id, configMap: s.objs.ConfigMap, agent: s.agent, gateway: s.objs.Gateway, made: s.objs.ConfigMap.CreationTimestamp.Time}
}

// put stores the sandbox's objects (the agent pod when it has one) in f.
func (s *testSandbox) put(f *fakeAPI) {
	f.put(s.objs.ConfigMap)
	f.put(s.objs.Secret)
	f.put(s.objs.AgentPolicy)
	f.put(s.objs.GatewayPolicy)
	if s.objs.Gateway != nil {
		f.put(s.objs.Gateway)
	}
	if s.agent != nil {
		f.put(s.agent)
	}
}

// fakeRenew is Controller.RenewCA for the tests: the renewed CA is the
// old one's text with " renewed" after it, and its certificate one
// valid for 7 days.
func fakeRenew(t testing.TB) func([]byte) ([]byte, []byte, error) {
	return func(caPEM []byte) ([]byte, []byte, error) {
		if len(caPEM) == 0 {
			return nil, nil, errors.New("no CA")
		}
		return testCert(t, time.Now().Add(7*24*time.Hour)), append(append([]byte(nil), caPEM...), " renewed"...), nil
	}
}

func TestControllerJudge(t *testing.T) {
	now := time.Now()
	c := &Controller{Grace: 10 * time.Minute, RenewBefore: 48 * time.Hour}
	base := newTestSandbox(t, "1a2b3c4d", now.Add(-time.Hour), now.Add(6*24*time.Hour))
	near := newTestSandbox(t, "1a2b3c4d", now.Add(-time.Hour), now.Add(47*time.Hour)).observed()
	for _, tc := range []struct {
		name string
		edit func(*observed)
		want string
	}{
		{"healthy", func(*observed) {}, Leave},
		{"agent ended, gateway running", func(o *observed) { o.agent.Status.Phase = corev1.PodSucceeded }, Leave},
		{"gateway pod gone", func(o *observed) { o.gateway = nil }, EndGone},
		{"gateway pod being deleted", func(o *observed) { o.gateway.DeletionTimestamp = &metav1.Time{Time: now} }, EndGone},
		{"gateway pod failed", func(o *observed) { o.gateway.Status.Phase = corev1.PodFailed }, EndGone},
		{"no agent pod, within the grace", func(o *observed) { o.agent, o.made = nil, now.Add(-9*time.Minute) }, Leave},
		{"no agent pod, past the grace", func(o *observed) { o.agent = nil }, Leftover},
		{"a ConfigMap alone, past the grace", func(o *observed) { o.agent, o.gateway = nil, nil }, Leftover},
		{"CA expires within RenewBefore", func(o *observed) { *o = near }, RenewCA},
		{"CA expired already", func(o *observed) {
			*o = newTestSandbox(t, "1a2b3c4d", now.Add(-time.Hour), now.Add(-time.Minute)).observed()
		}, Leave},
		{"CA expires within RenewBefore, gateway still starting", func(o *observed) { *o = near; o.gateway.Status.Phase = corev1.PodPending }, Leave},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base.observed()
			o.agent, o.gateway = o.agent.DeepCopy(), o.gateway.DeepCopy()
			tc.edit(&o)
			if got, why := c.Judge(now, o); got != tc.want {
				t.Errorf("got %q (%s), want %q", got, why, tc.want)
			}
		})
	}
}

// runController runs a controller on f as token until the test ends.
func runController(t *testing.T, f *fakeAPI, token string, out io.Writer) (stop func() error) {
	t.Helper()
	return startController(t, f, token, out, 48*time.Hour)
}

// startController runs a controller on f as token, renewing CAs
// renewBefore their end, until the test ends.
func startController(t *testing.T, f *fakeAPI, token string, out io.Writer, renewBefore time.Duration) (stop func() error) {
	t.Helper()
	c := &Controller{Cluster: f.connect(token), Identity: token, Grace: 10 * time.Minute, RenewBefore: renewBefore,
		Resync: 200 * time.Millisecond, RenewCA: fakeRenew(t), Out: out,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("the controller did not stop within 10 s")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// syncWriter is an io.Writer safe for the controller's goroutines.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestControllerActs: against a stand-in API server, the controller
// removes every object of a sandbox whose gateway pod is gone and of one
// that never got its agent pod past the grace period, renews the CA
// (Secret and ConfigMap) of one whose CA expires within RenewBefore, and
// writes nothing of a healthy sandbox or of one still starting.
func TestControllerActs(t *testing.T) {
	f := newFakeAPI(t)
	now := time.Now()
	farCA := now.Add(6 * 24 * time.Hour)
	healthy := newTestSandbox(t, "aaaaaaaa", now.Add(-time.Hour), farCA)
	gone := newTestSandbox(t, "bbbbbbbb", now.Add(-time.Hour), farCA)
	gone.objs.Gateway = nil
	leftover := newTestSandbox(t, "cccccccc", now.Add(-time.Hour), farCA)
	leftover.agent = nil
	starting := newTestSandbox(t, "dddddddd", now.Add(-time.Minute), farCA)
	starting.agent = nil
	expiring := newTestSandbox(t, "eeeeeeee", now.Add(-6*24*time.Hour), now.Add(time.Hour))
	for _, s := range []*testSandbox{healthy, gone, leftover, starting, expiring} {
		s.put(f)
	}
	out := &syncWriter{}
	runController(t, f, "leader", out)
	f.waitFor(20*time.Second, "the controller did not remove the sandboxes whose gateway is gone and that were left over", func() bool {
		return len(f.names(gone.id)) == 0 && len(f.names(leftover.id)) == 0
	})
	f.waitFor(20*time.Second, "the controller did not renew the expiring CA", func() bool {
		sec := f.get(expiring.objs.Secret).(*corev1.Secret)
		cm := f.get(expiring.objs.ConfigMap).(*corev1.ConfigMap)
		end, _ := certEnd([]byte(cm.Data[KeyCACert]))
		return string(sec.Data[KeyCA]) == string(expiring.caPEM)+" renewed" && end.After(now.Add(6*24*time.Hour)) &&
			strings.HasSuffix(cm.Data[KeyBundle], cm.Data[KeyCACert]) && strings.HasPrefix(cm.Data[KeyBundle], "ROOTS\n") &&
			!strings.Contains(cm.Data[KeyBundle], string(expiring.certPEM))
	})
	// A few more sweeps, for anything it would do to the others.
	time.Sleep(time.Second)
	for _, w := range f.writesLog() {
		for _, s := range []*testSandbox{healthy, starting} {
			if strings.Contains(w, s.id) {
				t.Errorf("the controller wrote to a sandbox it should leave alone: %s", w)
			}
		}
	}
	for _, s := range []*testSandbox{healthy, starting} {
		if got := len(f.names(s.id)); got != 6 && !(s == starting && got == 5) {
			t.Errorf("sandbox %s has %d objects left: %v", s.id, got, f.names(s.id))
		}
	}
	// The expiring sandbox's CA was renewed once, not at every sweep.
	renewals := 0
	for _, w := range f.writesLog() {
		if strings.HasSuffix(w, "PUT /api/v1/namespaces/ns/secrets/"+ObjectName(expiring.id)) {
			renewals++
		}
	}
	if renewals != 1 {
		t.Errorf("the Secret of the expiring CA was written %d times, want once", renewals)
	}
	for _, want := range []string{"removing sandbox bbbbbbbb: its gateway pod is gone", "removing sandbox cccccccc: it has no agent pod", "renewing the CA of sandbox eeeeeeee"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the controller's output lacks %q:\n%s", want, out)
		}
	}
}

// TestControllerRenewWindowPastTheCA: told a renewal window longer than
// a CA's 7 days (--renew-before 169h, how the project's cluster test
// makes a fresh sandbox's CA due), the controller renews a fresh
// sandbox's CA at once, and once: the renewed CA, valid 7 days, is due
// too, and renewing it at every look would rewrite the Secret and the
// ConfigMap for ever. The usual window leaves the same CA alone.
func TestControllerRenewWindowPastTheCA(t *testing.T) {
	now := time.Now()
	fresh := newTestSandbox(t, "eeeeeeee", now.Add(-time.Minute), now.Add(7*24*time.Hour-time.Minute))
	for _, tc := range []struct {
		window time.Duration
		want   string
	}{{48 * time.Hour, Leave}, {7*24*time.Hour - time.Hour, Leave}, {7*24*time.Hour + time.Hour, RenewCA}} {
		c := &Controller{RenewBefore: tc.window}
		if got, why := c.Judge(now, fresh.observed()); got != tc.want {
			t.Errorf("RenewBefore %v, a CA made a minute ago: %q (%s), want %q", tc.window, got, why, tc.want)
		}
	}

	f := newFakeAPI(t)
	fresh.put(f)
	out := &syncWriter{}
	startController(t, f, "leader", out, 7*24*time.Hour+time.Hour)
	f.waitFor(20*time.Second, "the controller did not renew the fresh CA with a window past its 7 days", func() bool {
		sec := f.get(fresh.objs.Secret).(*corev1.Secret)
		cm := f.get(fresh.objs.ConfigMap).(*corev1.ConfigMap)
		return strings.HasPrefix(string(sec.Data[KeyCA]), string(fresh.caPEM)+" renewed") && cm.Data[KeyCACert] != string(fresh.certPEM)
	})
	// Many sweeps (every 200 ms, and at each change the renewal made).
	time.Sleep(2 * time.Second)
	renewals := 0
	for _, w := range f.writesLog() {
		if strings.HasSuffix(w, "PUT /api/v1/namespaces/ns/secrets/"+ObjectName(fresh.id)) {
			renewals++
		}
	}
	if sec := f.get(fresh.objs.Secret).(*corev1.Secret); renewals != 1 || string(sec.Data[KeyCA]) != string(fresh.caPEM)+" renewed" {
		t.Errorf("the Secret was written %d times (its CA now %q), want once", renewals, sec.Data[KeyCA])
	}
	if want := "renewed the CA of sandbox eeeeeeee until "; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "not renewing it again") {
		t.Errorf("the controller's output does not say it renews the CA once:\n%s", out)
	}
}

// TestControllerOnlyLeaderActs: of two controllers on one namespace only
// the one that holds the Lease writes to the sandboxes; once it stops
// (and gives the Lease up), the other takes the Lease and acts.
func TestControllerOnlyLeaderActs(t *testing.T) {
	f := newFakeAPI(t)
	now := time.Now()
	first := newTestSandbox(t, "bbbbbbbb", now.Add(-time.Hour), now.Add(6*24*time.Hour))
	first.objs.Gateway = nil
	first.put(f)
	outA, outB := &syncWriter{}, &syncWriter{}
	defer func() {
		if t.Failed() {
			t.Logf("a said:\n%s\nb said:\n%s\nthe writes:\n%s", outA, outB, strings.Join(f.writesLog(), "\n"))
		}
	}()
	stopA := runController(t, f, "a", outA)
	// b starts once a leads.
	f.waitFor(10*time.Second, "nobody took the Lease", func() bool {
		l, _ := f.get(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: ControllerLease}}).(*coordinationv1.Lease)
		return l != nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == "a"
	})
	runController(t, f, "b", outB)
	f.waitFor(20*time.Second, "the leader did not remove the sandbox whose gateway is gone", func() bool { return len(f.names(first.id)) == 0 })
	// Another for the leader, while b has been watching for a while.
	time.Sleep(time.Second)
	second := newTestSandbox(t, "cccccccc", now.Add(-time.Hour), now.Add(6*24*time.Hour))
	second.objs.Gateway = nil
	second.put(f)
	f.waitFor(20*time.Second, "the leader did not remove the second sandbox", func() bool { return len(f.names(second.id)) == 0 })
	// b writes nothing while a renews (a renews every 200 ms, its Lease
	// lasts 2 s): not the Lease either, which b may take only once it
	// has seen it unchanged for 2 s.
	for _, w := range f.writesLog() {
		if strings.HasPrefix(w, "b ") {
			t.Errorf("the controller that does not lead wrote %s", w)
		}
	}
	if err := stopA(); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("the leader's Run: %v", err)
	}
	third := newTestSandbox(t, "dddddddd", now.Add(-time.Hour), now.Add(6*24*time.Hour))
	third.objs.Gateway = nil
	third.put(f)
	f.waitFor(20*time.Second, "once the leader stopped, the other did not take over", func() bool { return len(f.names(third.id)) == 0 })
	var byB []string
	for _, w := range f.writesLog() {
		if strings.HasPrefix(w, "b DELETE") {
			byB = append(byB, w)
		}
	}
	if !slices.ContainsFunc(byB, func(w string) bool { return strings.Contains(w, "pods") }) {
		t.Errorf("the new leader's deletes: %v", byB)
	}
}

// TestElectorWaitsForAStaleHolder: a Lease held by another is taken only
// once this process has seen it unchanged for its lease duration, by its
// own clock (the holder's renewTime may be on another clock); and of two
// electors that try at once only one holds it.
func TestElectorWaitsForAStaleHolder(t *testing.T) {
	f := newFakeAPI(t)
	ghost, secs, long := "ghost", int32(1), metav1.NewMicroTime(time.Now().Add(-time.Hour))
	f.put(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &ghost, LeaseDurationSeconds: &secs, RenewTime: &long}})
	leases := f.connect("x").Client.Leases("ns")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var leaders []string
	start := time.Now()
	var took time.Duration
	var wg sync.WaitGroup
	for _, id := range []string{"p", "q"} {
		e := &Elector{Leases: leases, Name: "l", Identity: id, LeaseDuration: time.Second, RenewDeadline: 800 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Run(ctx, func(ctx context.Context) {
				mu.Lock()
				leaders = append(leaders, id)
				if took == 0 {
					took = time.Since(start)
				}
				mu.Unlock()
				<-ctx.Done()
			})
		}()
	}
	time.Sleep(2500 * time.Millisecond)
	mu.Lock()
	if len(leaders) != 1 {
		t.Errorf("leaders: %v, want one", leaders)
	}
	if took < time.Second {
		t.Errorf("the Lease was taken %v after start, before its holder's lease duration (1 s) passed unchanged", took)
	}
	mu.Unlock()
	cancel()
	wg.Wait()
}
