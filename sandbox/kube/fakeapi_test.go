package kube

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
)

// fakeAPI is a stand-in API server on loopback that keeps objects of the
// resources Client speaks in memory: get, list (by label selector),
// watch (from a resource version), create, update (409 on a stale
// resource version), delete and delete by label. It records every write
// with the bearer token that made it.
type fakeAPI struct {
	t   testing.TB
	srv *httptest.Server

	mu      sync.Mutex
	rv      int
	objs    map[string]map[string]runtime.Object // by collection path, then name
	history []fakeEvent
	changed chan struct{} // closed and replaced at every change
	writes  []string      // "TOKEN METHOD PATH"
	calls   []string      // "VERB RESOURCE" of every request, as client-go's fake names actions
	gets    []string      // the paths of the gets of one object
	// gracefulPods makes a deletion of pods mark them terminating (their
	// deletion timestamp set), as the API server does for a graceful
	// deletion, and leaves their removal to the test, as to a node.
	gracefulPods bool
	// afterWrite, when set, is called after each write is applied (before
	// its answer reaches the client) with its method and path.
	afterWrite func(method, path string)
}

type fakeEvent struct {
	coll string
	rv   int
	typ  string
	obj  json.RawMessage
}

var fakeScheme = scheme()

func newFakeAPI(t testing.TB) *fakeAPI {
	f := &fakeAPI{t: t, objs: map[string]map[string]runtime.Object{}, changed: make(chan struct{})}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// kubeconfig writes a kubeconfig of the stand-in for the user token, in
// namespace ns, and connects with it.
func (f *fakeAPI) connect(token string) *Cluster {
	f.t.Helper()
	path := filepath.Join(f.t.TempDir(), "config")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ns}}]
current-context: x
`, f.srv.URL, token)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		f.t.Fatal(err)
	}
	c, err := Connect(path, "")
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// collection returns the collection path of obj in namespace ns.
func collection(obj runtime.Object) string {
	switch obj.(type) {
	case *corev1.Pod:
		return "/api/v1/namespaces/ns/pods"
	case *corev1.ConfigMap:
		return "/api/v1/namespaces/ns/configmaps"
	case *corev1.Secret:
		return "/api/v1/namespaces/ns/secrets"
	case *networkingv1.NetworkPolicy:
		return "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies"
	case *coordinationv1.Lease:
		return "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
	}
	panic(fmt.Sprintf("no collection for %T", obj))
}

var listKinds = map[string]string{"pods": "PodList", "configmaps": "ConfigMapList", "secrets": "SecretList", "networkpolicies": "NetworkPolicyList", "leases": "LeaseList"}

// put stores obj as it is (its creation time kept), as if made earlier.
func (f *fakeAPI) put(obj runtime.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, _ := meta.Accessor(obj)
	m.SetNamespace("ns")
	if ts := m.GetCreationTimestamp(); ts.IsZero() {
		m.SetCreationTimestamp(metav1.Now())
	}
	f.store(collection(obj), "ADDED", obj)
}

// store keeps obj at a new resource version and tells the watchers;
// f.mu is held.
func (f *fakeAPI) store(coll, typ string, obj runtime.Object) {
	f.rv++
	m, _ := meta.Accessor(obj)
	m.SetResourceVersion(strconv.Itoa(f.rv))
	if m.GetUID() == "" {
		m.SetUID(types.UID(fmt.Sprintf("uid-%d", f.rv)))
	}
	if f.objs[coll] == nil {
		f.objs[coll] = map[string]runtime.Object{}
	}
	if typ == "DELETED" {
		delete(f.objs[coll], m.GetName())
	} else {
		f.objs[coll][m.GetName()] = obj
	}
	f.history = append(f.history, fakeEvent{coll: coll, rv: f.rv, typ: typ, obj: encode(obj)})
	close(f.changed)
	f.changed = make(chan struct{})
}

func encode(obj runtime.Object) []byte {
	gvks, _, err := fakeScheme.ObjectKinds(obj)
	if err != nil {
		panic(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	return b
}

// get returns the stored object of coll's name, or nil.
func (f *fakeAPI) get(obj runtime.Object) runtime.Object {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, _ := meta.Accessor(obj)
	o := f.objs[collection(obj)][m.GetName()]
	if o == nil {
		return nil
	}
	return o.DeepCopyObject()
}

// names lists the stored objects whose label sbx.dev/sandbox is id, as
// resource/name.
func (f *fakeAPI) names(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for coll, objs := range f.objs {
		for name, o := range objs {
			m, _ := meta.Accessor(o)
			if m.GetLabels()[LabelSandbox] == id {
				out = append(out, coll[strings.LastIndex(coll, "/")+1:]+"/"+name)
			}
		}
	}
	return out
}

// verb names a request as client-go's verbs do: get, list, watch,
// create, update, delete, delete-collection.
func verb(method, name string, watch bool) string {
	switch {
	case method == http.MethodGet && watch:
		return "watch"
	case method == http.MethodGet && name == "":
		return "list"
	case method == http.MethodGet:
		return "get"
	case method == http.MethodPost:
		return "create"
	case method == http.MethodPut:
		return "update"
	case method == http.MethodDelete && name == "":
		return "delete-collection"
	}
	return strings.ToLower(method)
}

// callsLog returns every request so far, as "VERB RESOURCE".
func (f *fakeAPI) callsLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// change stores obj, changed, as a kubelet or another client would.
func (f *fakeAPI) change(obj runtime.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store(collection(obj), "MODIFIED", obj)
}

// remove deletes obj, as another client would.
func (f *fakeAPI) remove(obj runtime.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store(collection(obj), "DELETED", obj)
}

// getsLog returns the paths of the gets of one object so far.
func (f *fakeAPI) getsLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.gets...)
}

// writesLog returns the writes so far.
func (f *fakeAPI) writesLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.writes...)
}

// waitFor waits until cond holds (it is called at each change), or fails
// the test after d.
func (f *fakeAPI) waitFor(d time.Duration, what string, cond func() bool) {
	f.t.Helper()
	deadline := time.After(d)
	for {
		f.mu.Lock()
		ch := f.changed
		f.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			f.t.Fatalf("after %v: %s", d, what)
		}
	}
}

func (f *fakeAPI) status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code, "message": msg})
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	segs := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	i := -1
	for j, s := range segs {
		if s == "namespaces" {
			i = j
			break
		}
	}
	if i < 0 || len(segs) < i+3 {
		f.status(w, 404, "NotFound", "no such path "+r.URL.Path)
		return
	}
	res := segs[i+2]
	coll := "/" + strings.Join(segs[:i+3], "/")
	name := ""
	if len(segs) > i+3 {
		name = segs[i+3]
	}
	q := r.URL.Query()
	sel, err := labels.Parse(q.Get("labelSelector"))
	if err != nil {
		f.status(w, 400, "BadRequest", err.Error())
		return
	}
	f.mu.Lock()
	if r.Method != http.MethodGet {
		f.writes = append(f.writes, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+" "+r.Method+" "+r.URL.Path)
	}
	f.calls = append(f.calls, verb(r.Method, name, q.Get("watch") == "true")+" "+res)
	f.mu.Unlock()
	var body runtime.Object
	if b, _ := io.ReadAll(r.Body); len(b) > 0 && (r.Method == http.MethodPost || r.Method == http.MethodPut) {
		body, _, err = serializer.NewCodecFactory(fakeScheme).UniversalDeserializer().Decode(b, nil, nil)
		if err != nil {
			f.status(w, 400, "BadRequest", err.Error())
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodGet && name == "" && q.Get("watch") == "true" {
		if q.Get("sendInitialEvents") == "true" {
			f.status(w, 400, "BadRequest", "the stand-in has no streaming lists")
			return
		}
		from, _ := strconv.Atoi(q.Get("resourceVersion"))
		f.watch(w, r, coll, sel, from)
		return
	}
	if f.afterWrite != nil && r.Method != http.MethodGet {
		defer f.afterWrite(r.Method, r.URL.Path) // after the Unlock below
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && name == "":
		var items []json.RawMessage
		for _, o := range f.objs[coll] {
			m, _ := meta.Accessor(o)
			if sel.Matches(labels.Set(m.GetLabels())) {
				items = append(items, encode(o))
			}
		}
		if items == nil {
			items = []json.RawMessage{}
		}
		apiVersion := "v1"
		if segs[0] == "apis" {
			apiVersion = segs[1] + "/" + segs[2]
		}
		json.NewEncoder(w).Encode(map[string]any{"kind": listKinds[res], "apiVersion": apiVersion, "metadata": map[string]any{"resourceVersion": strconv.Itoa(f.rv)}, "items": items})
	case r.Method == http.MethodGet:
		f.gets = append(f.gets, r.URL.Path)
		o := f.objs[coll][name]
		if o == nil {
			f.status(w, 404, "NotFound", res+" "+name+" not found")
			return
		}
		w.Write(encode(o))
	case r.Method == http.MethodPost:
		m, _ := meta.Accessor(body)
		if f.objs[coll][m.GetName()] != nil {
			f.status(w, 409, "AlreadyExists", res+" "+m.GetName()+" already exists")
			return
		}
		if q.Get("dryRun") != "" {
			w.WriteHeader(201)
			w.Write(encode(body))
			return
		}
		m.SetNamespace("ns")
		m.SetCreationTimestamp(metav1.Now())
		f.store(coll, "ADDED", body)
		w.WriteHeader(201)
		w.Write(encode(body))
	case r.Method == http.MethodPut:
		m, _ := meta.Accessor(body)
		old := f.objs[coll][name]
		if old == nil {
			f.status(w, 404, "NotFound", res+" "+name+" not found")
			return
		}
		om, _ := meta.Accessor(old)
		if m.GetResourceVersion() != om.GetResourceVersion() {
			f.status(w, 409, "Conflict", "the object has been modified; please apply your changes to the latest version and try again")
			return
		}
		m.SetCreationTimestamp(om.GetCreationTimestamp())
		m.SetUID(om.GetUID())
		f.store(coll, "MODIFIED", body)
		w.Write(encode(body))
	case r.Method == http.MethodDelete:
		for n, o := range f.objs[coll] {
			m, _ := meta.Accessor(o)
			switch {
			case (name != "" || !sel.Matches(labels.Set(m.GetLabels()))) && n != name:
			case f.gracefulPods && res == "pods":
				if m.GetDeletionTimestamp() == nil {
					o = o.DeepCopyObject()
					m, _ = meta.Accessor(o)
					now := metav1.Now()
					m.SetDeletionTimestamp(&now)
					f.store(coll, "MODIFIED", o)
				}
			default:
				f.store(coll, "DELETED", o)
			}
		}
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
	default:
		f.status(w, 405, "MethodNotAllowed", r.Method)
	}
}

// watch streams coll's events after resource version from that match
// sel, until the client goes.
func (f *fakeAPI) watch(w http.ResponseWriter, r *http.Request, coll string, sel labels.Selector, from int) {
	w.WriteHeader(200)
	flusher := w.(http.Flusher)
	flusher.Flush()
	next := 0
	for {
		f.mu.Lock()
		var send []fakeEvent
		for ; next < len(f.history); next++ {
			ev := f.history[next]
			if ev.coll != coll || ev.rv <= from {
				continue
			}
			var m metav1.PartialObjectMetadata
			json.Unmarshal(ev.obj, &m)
			if sel.Matches(labels.Set(m.Labels)) {
				send = append(send, ev)
			}
		}
		ch := f.changed
		f.mu.Unlock()
		for _, ev := range send {
			fmt.Fprintf(w, `{"type":%q,"object":%s}`+"\n", ev.typ, ev.obj)
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		}
	}
}
