package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sbx-dev/sbx/sandbox/kube"
)

// BenchmarkKubeClusterSandboxes starts SBX_KUBE_BENCH_N (default 50)
// detached sandboxes one after another on the test cluster's node, as
// the documented user, reads each one's memory and CPU use from the
// kubelet's summary API once all run, and stops them all with one sbx
// kube stop. It reports the start latency (sbx kube run -d, from its
// start until it returns with the agent running: median and p95), a
// sandbox's own memory (its gateway pod and the capture shim in the
// agent pod, working set: median and max), the CPU its gateway and shim
// use idle (the cgroups' usage, median and max, against their requests)
// and the time to stop them all.
// scripts/bench-kube.sh runs it.
func BenchmarkKubeClusterSandboxes(b *testing.B) {
	n := 50
	if s := os.Getenv("SBX_KUBE_BENCH_N"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			b.Fatalf("SBX_KUBE_BENCH_N=%q: want a count above 0", s)
		}
	}
	for b.Loop() {
		k := newKubeTest(b)
		wctx, stopWatch := context.WithCancel(b.Context())
		times := k.watchPodTimes(wctx)
		starts := make([]time.Duration, 0, n)
		startedAt := map[string]time.Time{}
		ids := make([]string, 0, n)
		for i := range n {
			start := time.Now()
			out, errOut, code := k.sbx("run", "-d", "--image", k.agentImage, "--gateway-image", k.gwImage, "--pull", "Never",
				"--memory", "64m", "--cpus", "0.1", "--allow", "example.com", "--", "sleep", "3600")
			took := time.Since(start)
			if code != 0 {
				b.Fatalf("sandbox %d of %d: sbx kube run: exit %d\n%s%s", i+1, n, code, out, errOut)
			}
			ids = append(ids, strings.TrimSpace(out))
			starts = append(starts, took)
			startedAt[ids[len(ids)-1]] = start
		}
		stopWatch()
		// Where a start's time goes: when each step was seen, after sbx
		// kube run started.
		b.Logf("start steps, median (p95) after sbx kube run started: %s", times.summary(startedAt))
		// Which steps grow as the node fills up.
		tenth := max(1, n/10)
		for _, part := range []struct {
			name string
			ids  []string
		}{{"the first tenth", ids[:tenth]}, {"the last tenth", ids[n-tenth:]}} {
			some := map[string]time.Time{}
			for _, id := range part.ids {
				some[id] = startedAt[id]
			}
			b.Logf("start steps of %s: %s", part.name, times.summary(some))
		}
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			k.c.Delete(ctx, ids...)
		})
		use := k.sandboxUse(ids)
		own, agents := use.own, use.agent
		// Said before the stop, which can fail on a loaded node.
		b.Logf("memory before the stop: own (gateway pod + shim) median %.1f MiB max %.1f MiB",
			float64(own[len(own)/2])/(1<<20), float64(own[len(own)-1])/(1<<20))
		stopStart := time.Now()
		out, errOut, code := k.sbx(append([]string{"stop"}, ids...)...)
		stop := time.Since(stopStart)
		if code != 0 {
			b.Fatalf("sbx kube stop: exit %d\n%s%s", code, out, errOut)
		}
		// The node's set-up of a pod, and its NetworkPolicy plugin's of
		// the policies, take longer with more pods: the first sandboxes'
		// starts against the last ones'.
		b.Logf("start by order: %s", startsByOrder(starts))
		slices.Sort(starts)
		slices.Sort(own)
		b.ReportMetric(quantile(starts, 0.5).Seconds(), "start-median-s")
		b.ReportMetric(quantile(starts, 0.95).Seconds(), "start-p95-s")
		b.ReportMetric(float64(own[len(own)/2])/(1<<20), "own-MiB-median")
		b.ReportMetric(float64(own[len(own)-1])/(1<<20), "own-MiB-max")
		b.ReportMetric(stop.Seconds(), "stop-all-s")
		mib := func(v []uint64, i int) float64 { return float64(v[i]) / (1 << 20) }
		milli := func(v []uint64, i int) float64 { return float64(v[i]) / 1e6 }
		b.ReportMetric(milli(use.gwCPU, len(use.gwCPU)/2), "gateway-idle-mcpu-median")
		b.ReportMetric(milli(use.shimCPU, len(use.shimCPU)/2), "shim-idle-mcpu-median")
		b.Logf("%d sandboxes: start median %v p95 %v max %v; own memory (gateway pod + shim) median %.1f MiB max %.1f MiB (gateway median %.1f MiB, shim median %.1f MiB); agent containers (sleep) median %.1f MiB; stopping all %v",
			n, quantile(starts, 0.5).Round(time.Millisecond), quantile(starts, 0.95).Round(time.Millisecond), starts[len(starts)-1].Round(time.Millisecond),
			mib(own, len(own)/2), mib(own, len(own)-1), mib(use.gwMem, len(use.gwMem)/2), mib(use.shimMem, len(use.shimMem)/2), mib(agents, len(agents)/2), stop.Round(time.Millisecond))
		b.Logf("idle CPU (the cgroups' usage, from the kubelet's summary): gateway median %.2fm max %.2fm (request %s), shim median %.2fm max %.2fm (request %s); agent container (sleep) median %.2fm",
			milli(use.gwCPU, len(use.gwCPU)/2), milli(use.gwCPU, len(use.gwCPU)-1), kube.GatewayCPURequest.String(),
			milli(use.shimCPU, len(use.shimCPU)/2), milli(use.shimCPU, len(use.shimCPU)-1), kube.SmallCPURequest.String(), milli(use.agentCPU, len(use.agentCPU)/2))
	}
}

// startsByOrder says the median start of the first tenth of starts (in
// the order they were made, at least one), and of the last tenth.
func startsByOrder(starts []time.Duration) string {
	k := max(1, len(starts)/10)
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return quantile(d, 0.5).Round(time.Millisecond)
	}
	return fmt.Sprintf("sandboxes 1-%d median %v, %d-%d median %v", k, median(starts[:k]), len(starts)-k+1, len(starts), median(starts[len(starts)-k:]))
}

// quantile returns the q quantile of sorted d (nearest rank).
func quantile(d []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(d))+0.5) - 1
	return d[max(0, min(i, len(d)-1))]
}

// statsSummary is the part of the kubelet's /stats/summary that
// sandboxUse reads.
type statsSummary struct {
	Pods []struct {
		PodRef struct {
			Name, Namespace string
		} `json:"podRef"`
		Containers []struct {
			Name   string `json:"name"`
			Memory struct {
				WorkingSetBytes uint64 `json:"workingSetBytes"`
			} `json:"memory"`
			CPU struct {
				UsageNanoCores *uint64 `json:"usageNanoCores"`
			} `json:"cpu"`
		} `json:"containers"`
	} `json:"pods"`
}

// sandboxUsage is what sandboxUse reads of the sandboxes' containers, each
// sorted: memory as working sets (bytes), CPU as the cgroup's usage over
// the kubelet's last sampling interval (nanocores).
type sandboxUsage struct {
	own, agent, gwMem, shimMem []uint64
	gwCPU, shimCPU, agentCPU   []uint64
}

// sandboxUse returns, for each sandbox of ids, the working set of its
// own parts (every container of its gateway pod, and its agent pod's
// capture shim) and of its agent container, and the CPU each uses, from
// the kubelet's summary API (which the kubelet refreshes every 10 to 15
// s: it waits until every pod is in it with its CPU usage).
func (k *kubeTest) sandboxUse(ids []string) sandboxUsage {
	k.t.Helper()
	nodes, err := k.cs.CoreV1().Nodes().List(k.t.Context(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		k.t.Fatalf("the test cluster's node: %v (%d nodes)", err, len(nodes.Items))
	}
	node := nodes.Items[0].Name
	deadline := time.Now().Add(90 * time.Second)
	type usage struct{ mem, cpu uint64 }
	for {
		raw, err := k.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy/stats/summary").DoRaw(k.t.Context())
		if err != nil {
			k.t.Fatalf("the kubelet's summary: %v", err)
		}
		var sum statsSummary
		if err := json.Unmarshal(raw, &sum); err != nil {
			k.t.Fatalf("the kubelet's summary: %v", err)
		}
		use := map[string]usage{} // pod/container -> its use; no CPU figure yet leaves it out
		for _, p := range sum.Pods {
			if p.PodRef.Namespace != k.ns {
				continue
			}
			for _, c := range p.Containers {
				if c.CPU.UsageNanoCores != nil {
					use[p.PodRef.Name+"/"+c.Name] = usage{c.Memory.WorkingSetBytes, *c.CPU.UsageNanoCores}
				}
			}
		}
		var u sandboxUsage
		complete := true
		for _, id := range ids {
			gw, okGW := use[kube.GatewayPodName(id)+"/gateway"]
			shim, okShim := use[kube.ObjectName(id)+"/shim"]
			agent, okAgent := use[kube.ObjectName(id)+"/agent"]
			if !okGW || !okShim || !okAgent || gw.mem == 0 || shim.mem == 0 {
				complete = false
				break
			}
			u.own = append(u.own, gw.mem+shim.mem)
			u.agent = append(u.agent, agent.mem)
			u.gwMem, u.shimMem = append(u.gwMem, gw.mem), append(u.shimMem, shim.mem)
			u.gwCPU, u.shimCPU, u.agentCPU = append(u.gwCPU, gw.cpu), append(u.shimCPU, shim.cpu), append(u.agentCPU, agent.cpu)
		}
		if complete {
			for _, v := range [][]uint64{u.own, u.agent, u.gwMem, u.shimMem, u.gwCPU, u.shimCPU, u.agentCPU} {
				slices.Sort(v)
			}
			return u
		}
		if time.Now().After(deadline) {
			k.t.Fatalf("the kubelet's summary lacks some of the %d sandboxes' containers after 90 s: %v", len(ids), fmt.Sprint(len(use), " containers"))
		}
		time.Sleep(2 * time.Second)
	}
}
