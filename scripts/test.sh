#!/usr/bin/env bash
# Installs what sbx's tests need on a Debian or Ubuntu machine (skipping what
# is already there) and runs the whole suite: gofmt, go vet (Linux and, to
# catch a missing build tag, darwin), go test -race and, for the whole
# suite, sbx selftest with each container runtime, as a user would run it,
# and the mutation check (scripts/mutate), which breaks security-critical
# code, one mutation per scratch copy, and wants the tests that guard it to fail.
#
#   scripts/test.sh                 # everything (with, as root, sbx kube's
#                                   # tests on a test cluster: scripts/kube-test.sh)
#   scripts/test.sh ./netpolicy/... # only some packages (no selftest)
#
# Privileged tests (named TestPrivileged*) need root and skip, saying so,
# without it. As root, or with SBX_REQUIRE_PRIVILEGED=1, a privileged test
# that skips fails the run instead: CI runs this script as root through
# .ci/run, which sets it. The tests' output goes through scripts/testreport,
# which ends with a list of the tests that skipped and why.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib.sh
need_go
# gcc for the race detector; iproute2 and iptables for the sandbox's
# privileged tests (throwaway namespaces); containerd, runc and
# busybox-static for its container tests; docker.io for the same tests
# with --runtime docker (their images are loaded through Docker's API:
# no registry is needed); git and python3 for the first-session test, which
# runs them (and the machine's Node.js and npm) as a user would.
need_packages gcc iproute2 iptables containerd runc tini busybox-static docker.io chromium git python3
need_containerd
need_docker

pkgs=("$@")
whole=0
[ ${#pkgs[@]} -gt 0 ] || { pkgs=(./...); whole=1; }
report_dir=$(mktemp -d)
kube_build_pid=
vet_pid=
mutate_pid=
# On the way out: a cluster build, go vet or mutation check still running
# is stopped (its process group: the go command and its compilers), the
# reports removed.
cleanup() {
	if [ -n "$mutate_pid" ] && kill -0 "$mutate_pid" 2>/dev/null; then
		kill -- "-$mutate_pid" 2>/dev/null || true
		wait "$mutate_pid" 2>/dev/null || true
	fi
	if [ -n "$vet_pid" ] && kill -0 "$vet_pid" 2>/dev/null; then
		kill -- "-$vet_pid" 2>/dev/null || true
		wait "$vet_pid" 2>/dev/null || true
	fi
	if [ -n "$kube_build_pid" ] && kill -0 "$kube_build_pid" 2>/dev/null; then
		kill -- "-$kube_build_pid" 2>/dev/null || true
		wait "$kube_build_pid" 2>/dev/null || true
	fi
	rm -rf "$report_dir"
}
trap cleanup EXIT

# The whole suite, as root, ends with sbx kube's tests on a test cluster
# whose programs are built from Go sources the first time: about 20 CPU
# minutes. That build starts now (after the package installs: gcc decides
# whether cgo is on), nice'd, in a session of its own, beside the Go
# tests (which leave CPU idle while their sandboxes start and wait), and
# is waited for before the cluster starts; its output goes to a log,
# shown when it fails. Where it is cached already it ends at once.
if [ "$whole" -eq 1 ] && [ "$(id -u)" -eq 0 ]; then
	log "building the test cluster's programs in the background (scripts/kube-build.sh)"
	setsid scripts/kube-build.sh >"$report_dir/kube-build.log" 2>&1 </dev/null &
	kube_build_pid=$!
fi

log "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change these files (run gofmt -w):" >&2
	echo "$unformatted" >&2
	exit 1
fi

# go vet, for Linux and (to catch a missing build tag) darwin, runs in
# the background beside go test, nice'd: on a cold machine each compiles
# every dependency once more for itself, CPU that the tests' sandboxes
# leave idle while they start and wait. It is waited for after the tests.
log "go vet (linux, then darwin) in the background"
setsid nice -n 15 bash -c 'go vet "$@" && GOOS=darwin go vet "$@"' vet "${pkgs[@]}" \
	>"$report_dir/vet.log" 2>&1 </dev/null &
vet_pid=$!

# -timeout 40m: cmd/sbx's privileged tests (sandboxes, runtimes killed
# and restarted, the selftest) take minutes; go test's 10-minute default
# per package is too close on a busy machine.
#
# -p 1: one package's tests at a time. The garbage-collection tests of
# sandbox and cmd/sbx look at every sbx-named namespace, veth and chain on
# the machine, so another package's test sandbox, running at the same time
# with its state in its own directory, would look like a leftover to them.
#
# go test -json feeds scripts/testreport, built first so that its own
# build does not mix with the tests' output. It fails the run when a
# TestPrivileged* test skips as root (or under SBX_REQUIRE_PRIVILEGED=1).
go build -o "$report_dir/testreport" ./scripts/testreport
log "go test -race"
set +e
go test -json -race -count=1 -p 1 -timeout 40m "${pkgs[@]}" |
	"$report_dir/testreport"
status=("${PIPESTATUS[@]}")
set -e
if [ "${status[0]}" -ne 0 ]; then
	exit "${status[0]}"
fi
if [ "${status[1]}" -ne 0 ]; then
	exit "${status[1]}"
fi
log "waiting for go vet"
if ! wait "$vet_pid"; then
	vet_pid=
	cat "$report_dir/vet.log" >&2
	echo "$0: go vet failed (above)" >&2
	exit 1
fi
vet_pid=
log "go vet passed"

# sbx selftest: the escape catalogue, from a sandbox of the sbx just
# tested, with each runtime. It needs root, as the privileged tests do;
# where they are required, so is it.
if [ "$whole" -eq 1 ]; then
	if [ "$(id -u)" -eq 0 ]; then
		go build -o "$report_dir/sbx" ./cmd/sbx
		for rt in containerd docker; do
			log "sbx selftest --runtime $rt"
			"$report_dir/sbx" selftest --runtime "$rt"
		done
		# The security tests must be able to fail: each mutation in
		# scripts/mutations breaks one place of the code that keeps a
		# promise, and the tests it names must go red. It runs beside
		# the cluster's tests, nice'd, in a session of its own: it is
		# mostly compiling (22 minutes of a cold machine, two mutations
		# at a time), they are mostly waiting for pods. Its report is
		# shown when both end.
		log "mutation check (scripts/mutate) in the background, beside the cluster's tests"
		go build -o "$report_dir/mutate" ./scripts/mutate
		setsid nice -n 10 "$report_dir/mutate" >"$report_dir/mutate.log" 2>&1 </dev/null &
		mutate_pid=$!
		# sbx kube on a real single-node cluster, built from Go sources
		# the first time (cached in /var/cache/sbx-kube, built since the
		# start) and taken down after: cmd/sbx's TestKubeCluster* tests,
		# which the go test run above skips for want of a cluster.
		log "waiting for the test cluster's programs (scripts/kube-build.sh)"
		waited=$(date +%s)
		if ! wait "$kube_build_pid"; then
			kube_build_pid=
			cat "$report_dir/kube-build.log" >&2
			echo "$0: building the test cluster's programs failed (above)" >&2
			exit 1
		fi
		kube_build_pid=
		cat "$report_dir/kube-build.log" >&2
		log "the test cluster's programs are ready (waited $(($(date +%s) - waited)) s for them)"
		log "sbx kube tests on the test cluster (scripts/kube-test.sh)"
		kube_status=0
		scripts/kube-test.sh || kube_status=$?
		log "waiting for the mutation check"
		mutate_status=0
		wait "$mutate_pid" || mutate_status=$?
		mutate_pid=
		cat "$report_dir/mutate.log"
		log "mutation check ended (exit $mutate_status)"
		if [ "$kube_status" -ne 0 ]; then
			echo "$0: sbx kube's tests on the test cluster failed (exit $kube_status, above)" >&2
			exit "$kube_status"
		fi
		if [ "$mutate_status" -ne 0 ]; then
			echo "$0: the mutation check failed (exit $mutate_status): a mutation above survived or no longer applies" >&2
			exit "$mutate_status"
		fi
	elif [ "${SBX_REQUIRE_PRIVILEGED:-}" = 1 ]; then
		echo "$0: sbx selftest needs root, and SBX_REQUIRE_PRIVILEGED=1 requires it: run as root" >&2
		exit 1
	else
		log "sbx selftest skipped: it needs root (sudo scripts/test.sh runs it)"
	fi
fi
