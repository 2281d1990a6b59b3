package kube

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// fakeSandbox returns a sandbox's six objects, for a fake cluster.
func fakeSandbox(t *testing.T, id, name string) []runtime.Object {
	t.Helper()
	s := testSpec()
	s.ID, s.Name, s.Namespace = id, name, "ns"
	o, err := MakeObjects(s)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := AgentPod(s, netip.MustParseAddr("10.244.0.9"))
	if err != nil {
		t.Fatal(err)
	}
	return []runtime.Object{o.ConfigMap, o.Secret, o.AgentPolicy, o.GatewayPolicy, o.Gateway, agent}
}

// fakeCluster is a stand-in API server holding objs, and a Cluster of
// it.
func fakeCluster(t *testing.T, objs ...runtime.Object) (*fakeAPI, *Cluster) {
	f := newFakeAPI(t)
	for _, o := range objs {
		f.put(o)
	}
	return f, f.connect("t")
}

// Delete removes the pods, and sees them gone, before it deletes their
// NetworkPolicies: a container never runs without its policy.
func TestDeletePodsBeforePolicies(t *testing.T) {
	f, c := fakeCluster(t, fakeSandbox(t, "1a2b3c4d", "")...)
	if err := c.Delete(t.Context(), "1a2b3c4d"); err != nil {
		t.Fatal(err)
	}
	if left, err := c.Objects(t.Context(), "1a2b3c4d"); err != nil || len(left) > 0 {
		t.Fatalf("left: %v %v", left, err)
	}
	order := f.callsLog()
	podsGone := slices.Index(order, "list pods")
	policies := slices.Index(order, "delete-collection networkpolicies")
	if first := slices.Index(order, "delete-collection pods"); first < 0 || podsGone < first || policies < podsGone {
		t.Errorf("actions %v: want the pods deleted, then listed (gone), then the NetworkPolicies deleted", order)
	}
}

// OtherPolicies names the namespace's policies that select a sandbox's
// pods (NetworkPolicies add up), and not its own or those for others.
func TestOtherPolicies(t *testing.T) {
	objs := fakeSandbox(t, "1a2b3c4d", "")
	np := func(name string, sel metav1.LabelSelector) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Spec: networkingv1.NetworkPolicySpec{PodSelector: sel}}
	}
	objs = append(objs,
		np("allow-all-egress", metav1.LabelSelector{}),
		np("web-only", metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}),
		np("agents", metav1.LabelSelector{MatchLabels: map[string]string{LabelRole: RoleAgent}}),
	)
	_, c := fakeCluster(t, objs...)
	got, err := c.OtherPolicies(t.Context(), "1a2b3c4d")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"agents", "allow-all-egress"}; !slices.Equal(got, want) {
		t.Errorf("OtherPolicies = %v, want %v", got, want)
	}
}

// A name given to two sandboxes (made elsewhere) names neither; Create
// refuses a name in use.
func TestNamesUnique(t *testing.T) {
	objs := append(fakeSandbox(t, "1a2b3c4d", "agent1"), fakeSandbox(t, "5e6f7a8b", "agent1")...)
	_, c := fakeCluster(t, objs...)
	if _, err := c.Find(t.Context(), "agent1"); err == nil || !strings.Contains(err.Error(), "2 sandboxes") {
		t.Errorf("Find of a name two sandboxes have: %v, want an error saying so", err)
	}
	if sb, err := c.Find(t.Context(), "5e6f"); err != nil || sb.ID != "5e6f7a8b" {
		t.Errorf("Find by id prefix: %v %v", sb, err)
	}
	s := testSpec()
	s.ID, s.Name = "9c0d1e2f", "agent1"
	if _, err := c.Create(t.Context(), s, nil, false); !errors.Is(err, ErrNameInUse) {
		t.Errorf("Create with a name in use: %v, want ErrNameInUse", err)
	}
	// One sandbox of that name is enough.
	_, c = fakeCluster(t, fakeSandbox(t, "1a2b3c4d", "agent1")...)
	if _, err := c.Create(t.Context(), s, nil, false); !errors.Is(err, ErrNameInUse) {
		t.Errorf("Create with the name of one sandbox: %v, want ErrNameInUse", err)
	}
}

// Delete of many sandboxes removes them together: one deletion of each
// kind for all of them (not one per sandbox, each waited on in turn, as
// sbx kube stop did), their pods gone before their NetworkPolicies go,
// and no other sandbox's objects touched.
func TestDeleteMany(t *testing.T) {
	ids := []string{"1a2b3c4d", "5e6f7a8b", "9c0d1e2f"}
	var objs []runtime.Object
	for _, id := range append(slices.Clone(ids), "0badc0de") {
		objs = append(objs, fakeSandbox(t, id, "")...)
	}
	f, c := fakeCluster(t, objs...)
	if err := c.Delete(t.Context(), ids...); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if left, err := c.Objects(t.Context(), id); err != nil || len(left) > 0 {
			t.Errorf("sandbox %s: left %v %v", id, left, err)
		}
	}
	if left, err := c.Objects(t.Context(), "0badc0de"); err != nil || len(left) != 6 {
		t.Errorf("the other sandbox: left %v %v, want its 6 objects", left, err)
	}
	order := f.callsLog()
	deletes := map[string]int{}
	for _, call := range order {
		if kind, ok := strings.CutPrefix(call, "delete-collection "); ok {
			deletes[kind]++
		}
	}
	for _, kind := range []string{"pods", "networkpolicies", "secrets", "configmaps"} {
		if deletes[kind] != 1 {
			t.Errorf("%d deletions of %s for 3 sandboxes, want 1 (actions %v)", deletes[kind], kind, order)
		}
	}
	podsGone := slices.Index(order, "list pods")
	if policies := slices.Index(order, "delete-collection networkpolicies"); podsGone < 0 || policies < podsGone {
		t.Errorf("actions %v: want the pods listed (gone) before the NetworkPolicies are deleted", order)
	}
	if err := c.Delete(t.Context(), "1a2b3c4d", ""); err == nil {
		t.Error("Delete with an empty id: no error")
	}
}

// Objects of the sandbox made while Delete runs (an sbx kube run still
// making it, as a controller that judged it a leftover saw it) are
// deleted too, pods before policies still: Delete returns once none is
// left, and does not wait out DeleteStall for objects it never deleted.
func TestDeleteWhileTheSandboxIsMade(t *testing.T) {
	objs := fakeSandbox(t, "1a2b3c4d", "")
	f, c := fakeCluster(t, objs[0]) // the ConfigMap, made first
	var once sync.Once
	f.afterWrite = func(method, path string) {
		if method == http.MethodDelete && strings.HasSuffix(path, "/pods") {
			// The rest, once the pods were deleted.
			once.Do(func() {
				for _, o := range objs[1:] {
					f.put(o.DeepCopyObject())
				}
			})
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := c.Delete(ctx, "1a2b3c4d"); err != nil {
		t.Errorf("Delete of a sandbox whose other objects are made as its pods are deleted: %v", err)
	}
	if left := f.names("1a2b3c4d"); len(left) > 0 {
		t.Errorf("left %v", left)
	}
	// The pods made after their deletion were deleted, and gone, before
	// the policies.
	var order []string
	for _, w := range f.writesLog() {
		if strings.Contains(w, "DELETE") {
			order = append(order, w[strings.LastIndex(w, "/")+1:])
		}
	}
	if want := []string{"pods", "pods", "networkpolicies", "secrets", "configmaps"}; !slices.Equal(order, want) {
		t.Errorf("deletions %v, want %v", order, want)
	}

	// A ConfigMap made again once the ConfigMaps were deleted: another
	// round.
	f, c = fakeCluster(t, objs[0].DeepCopyObject())
	var again sync.Once
	f.afterWrite = func(method, path string) {
		if method == http.MethodDelete && strings.HasSuffix(path, "/configmaps") {
			again.Do(func() { f.put(objs[0].DeepCopyObject()) })
		}
	}
	if err := c.Delete(ctx, "1a2b3c4d"); err != nil {
		t.Errorf("Delete of a sandbox whose ConfigMap is made again as it is deleted: %v", err)
	}
	if left := f.names("1a2b3c4d"); len(left) > 0 {
		t.Errorf("left %v", left)
	}

	// An agent pod made again at every deletion: Delete gives up after
	// DeleteStall, naming it, and leaves the policies.
	defer func(d time.Duration) { DeleteStall = d }(DeleteStall)
	DeleteStall = time.Second
	agent := objs[len(objs)-1]
	f, c = fakeCluster(t, objs...)
	f.afterWrite = func(method, path string) {
		if method == http.MethodDelete && strings.HasSuffix(path, "/pods") {
			f.put(agent.DeepCopyObject())
		}
	}
	err := c.Delete(ctx, "1a2b3c4d")
	if err == nil || !strings.Contains(err.Error(), "still there after 1s") || !strings.Contains(err.Error(), ObjectName("1a2b3c4d")) {
		t.Errorf("Delete of a sandbox whose agent pod is made again at every deletion: %v; want an error naming it", err)
	}
	if left := f.names("1a2b3c4d"); !slices.Contains(left, "networkpolicies/sbx-1a2b3c4d-agent") {
		t.Errorf("left %v: want the NetworkPolicies kept while a pod is there", left)
	}
}

// Delete waits as long as the sandboxes' pods keep going, however long
// that takes in all, and fails once none has gone for DeleteStall, naming
// those left (and leaving their NetworkPolicies): a node stops many pods
// at its own pace, and fifty sandboxes on the loaded test node took longer
// than the 109 s sbx kube stop gave them (a minute and a second a
// sandbox).
func TestDeleteWaitsWhilePodsGo(t *testing.T) {
	defer func(d time.Duration) { DeleteStall = d }(DeleteStall)
	// Far apart, for a machine busy with other work: the test's own
	// goroutines may wait for the CPU.
	DeleteStall = 3 * time.Second
	ids := []string{"1a2b3c4d", "5e6f7a8b", "9c0d1e2f"}
	var objs []runtime.Object
	var pods []*corev1.Pod
	for _, id := range ids {
		for _, o := range fakeSandbox(t, id, "") {
			objs = append(objs, o)
			if p, ok := o.(*corev1.Pod); ok {
				pods = append(pods, p)
			}
		}
	}
	f, c := fakeCluster(t, objs...)
	f.gracefulPods = true
	// The node: once the pods are being deleted, it removes one every
	// second, 6 s for the six, twice DeleteStall.
	nodeDone := make(chan struct{})
	go func() {
		defer close(nodeDone)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if p, _ := f.get(pods[0]).(*corev1.Pod); p != nil && p.DeletionTimestamp != nil {
				break
			}
		}
		for _, p := range pods {
			time.Sleep(time.Second)
			f.remove(p)
		}
	}()
	if err := c.Delete(t.Context(), ids...); err != nil {
		t.Errorf("Delete of 3 sandboxes whose pods go one a second, DeleteStall 3 s: %v; want it to wait while they go", err)
	}
	<-nodeDone
	for _, id := range ids {
		if left := f.names(id); len(left) > 0 {
			t.Errorf("sandbox %s: left %v", id, left)
		}
	}

	// A node that stops nothing.
	f, c = fakeCluster(t, fakeSandbox(t, "1a2b3c4d", "")...)
	f.gracefulPods = true
	err := c.Delete(t.Context(), "1a2b3c4d")
	if err == nil || !strings.Contains(err.Error(), "no pod went for 3s") || !strings.Contains(err.Error(), GatewayPodName("1a2b3c4d")) {
		t.Errorf("Delete of a sandbox whose pods stay: %v; want an error naming them", err)
	}
	if left := f.names("1a2b3c4d"); !slices.Contains(left, "networkpolicies/sbx-1a2b3c4d-agent") {
		t.Errorf("left %v: want the NetworkPolicies kept while the pods are there", left)
	}
	// The caller's context ends the wait first (once Delete follows the
	// pods): the error still names them.
	DeleteStall = time.Minute
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watches := func() int { return strings.Count(strings.Join(f.callsLog(), "\n"), "watch pods") }
	before := watches()
	go func() {
		for ctx.Err() == nil && watches() == before {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}()
	err = c.Delete(ctx, "1a2b3c4d")
	if err == nil || !strings.Contains(err.Error(), "still there when the wait ended") || !strings.Contains(err.Error(), GatewayPodName("1a2b3c4d")) {
		t.Errorf("Delete whose context ends while the pods stay: %v; want an error naming them", err)
	}
}

func TestSandboxSelector(t *testing.T) {
	for _, tc := range []struct {
		ids  []string
		want string
	}{
		{[]string{"1a2b3c4d"}, "sbx.dev/sandbox=1a2b3c4d"},
		{[]string{"1a2b3c4d", "5e6f7a8b"}, "sbx.dev/sandbox in (1a2b3c4d,5e6f7a8b)"},
	} {
		got := sandboxSelector(tc.ids)
		if got != tc.want {
			t.Errorf("sandboxSelector(%q) = %q, want %q", tc.ids, got, tc.want)
		}
		sel, err := labels.Parse(got)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range tc.ids {
			if !sel.Matches(labels.Set{LabelSandbox: id}) {
				t.Errorf("%q does not match sandbox %s", got, id)
			}
		}
		if sel.Matches(labels.Set{LabelSandbox: "0badc0de"}) {
			t.Errorf("%q matches another sandbox", got)
		}
	}
}

// List names the hosts a sandbox's gateway pod records (sbx kube run
// --record-llm), read from its command: sbx kube stop keeps or refuses to
// drop their recordings, which go with the pod. A sandbox that records
// nothing has none.
func TestListRecords(t *testing.T) {
	s := testSpec()
	s.ID, s.Namespace = "5e6f7a8b", "ns"
	s.RecordLLM = []string{"api.anthropic.com", "api.openai.com"}
	o, err := MakeObjects(s)
	if err != nil {
		t.Fatal(err)
	}
	_, c := fakeCluster(t, append(fakeSandbox(t, "1a2b3c4d", ""), o.ConfigMap, o.Gateway)...)
	all, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, sb := range all {
		got[sb.ID] = sb.Records
	}
	if want := s.RecordLLM; !slices.Equal(got["5e6f7a8b"], want) || len(got["1a2b3c4d"]) != 0 {
		t.Errorf("Records: %q, want %q for the recording sandbox and none for the other", got, want)
	}
}

// StopAgent removes the agent pod alone, and sees it gone: the gateway
// pod, which holds the recordings sbx kube stop reads next, and the
// sandbox's other objects stay, as do other sandboxes' agents.
func TestStopAgent(t *testing.T) {
	_, c := fakeCluster(t, append(fakeSandbox(t, "1a2b3c4d", ""), fakeSandbox(t, "5e6f7a8b", "")...)...)
	if err := c.StopAgent(t.Context(), "1a2b3c4d"); err != nil {
		t.Fatal(err)
	}
	left, err := c.Objects(t.Context(), "1a2b3c4d")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	want := []string{"configmap/sbx-1a2b3c4d", "networkpolicy/sbx-1a2b3c4d-agent", "networkpolicy/sbx-1a2b3c4d-gateway", "pod/sbx-1a2b3c4d-gateway", "secret/sbx-1a2b3c4d"}
	if !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	if other, err := c.Objects(t.Context(), "5e6f7a8b"); err != nil || len(other) != 6 {
		t.Errorf("the other sandbox: %v %v, want its 6 objects", other, err)
	}
	if err := c.StopAgent(t.Context(), "1a2b3c4d"); err != nil {
		t.Errorf("StopAgent of an agent already gone: %v", err)
	}
}
