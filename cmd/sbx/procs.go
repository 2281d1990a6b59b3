package main

import (
	"os"
	"runtime"
)

// gatewayProcs sets GOMAXPROCS for a process that serves a gateway (sbx
// run, sbx gateway) to half the CPUs the runtime would use by default (the
// machine's, or its cgroup's quota), at least one, and returns it. The
// GOMAXPROCS environment variable, when set, wins and nothing is changed.
//
// The gateway shares the machine with the sandbox it serves and with the
// servers that sandbox reaches, and relays mostly small requests, each of
// which wakes a goroutine twice. With every CPU as a P, the Go scheduler
// wakes idle threads to look for work on each of those wakeups, and they
// spin on the cores the sandbox and the upstreams need: on 2 CPUs one P
// took the gateway's CPU per forwarded request from about 60 µs to about
// 43 µs and its requests per second up by 7-33% (scripts/bench-gateway.sh
// conditions). The sandbox's own default CPU limit leaves one CPU free
// (sandbox.DefaultLimits), which the gateway then mostly keeps to.
//
// It may be called more than once: it starts from the runtime's default
// each time.
func gatewayProcs() int {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	runtime.SetDefaultGOMAXPROCS()
	n := max(1, runtime.GOMAXPROCS(0)/2)
	runtime.GOMAXPROCS(n)
	return n
}
