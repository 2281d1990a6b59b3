#!/usr/bin/env bash
# Runs sbx kube's tests (cmd/sbx's TestKubeCluster*) on the test cluster:
# brings it up with scripts/kube-up.sh unless one is up already (then it
# is used and left up), loads sbx's image and the test agent image into it
# (scripts/kube-images.sh), and runs the tests from inside the cluster's
# network namespace, where its API server answers. A cluster it started is
# taken down at the end, whatever happened (scripts/kube-down.sh).
#
#   scripts/kube-test.sh            # every TestKubeCluster test
#   scripts/kube-test.sh -run NAME  # go test flags for the test binary
#
# Needs root. scripts/test.sh runs it as part of the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
. scripts/kube/kube.sh
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (the test cluster does); run it with sudo" >&2; exit 1; }
need_go

started=0
if [ ! -e "$kube_dir/run.pids" ]; then
	started=1
	trap 'scripts/kube-down.sh >/dev/null 2>&1 || true' EXIT
	scripts/kube-up.sh
fi
refs=$(scripts/kube-images.sh)
gateway_image=$(echo "$refs" | sed -n 1p)
agent_image=$(echo "$refs" | sed -n 2p)
[ -n "$gateway_image" ] && [ -n "$agent_image" ] || { echo "$0: scripts/kube-images.sh named no images" >&2; exit 1; }

# The test binary is built here, where the module proxy is reachable, and
# run in the cluster's network namespace, where the API server is.
w=$(mktemp -d)
trap 'rm -rf "$w"; [ "$started" -eq 0 ] || scripts/kube-down.sh >/dev/null 2>&1 || true' EXIT
# SBX_KUBE_TEST_RACE=0 builds it without the race detector, for timings
# (scripts/bench-kube.sh).
race=-race
[ "${SBX_KUBE_TEST_RACE:-1}" != 0 ] || race=
go test -c $race -o "$w/sbx.test" ./cmd/sbx
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-test.run '^TestKubeCluster')
log "sbx kube tests on the test cluster (images $gateway_image, $agent_image)"
(cd cmd/sbx && in_node env \
	SBX_KUBE_TEST_KUBECONFIG="$kube_dir/admin.kubeconfig" \
	SBX_KUBE_TEST_KUBECTL="$kube_bin_k8s/kubectl" \
	SBX_KUBE_TEST_GATEWAY_IMAGE="$gateway_image" \
	SBX_KUBE_TEST_AGENT_IMAGE="$agent_image" \
	SBX_REQUIRE_KUBE=1 \
	"$w/sbx.test" -test.v -test.count=1 -test.timeout 20m "${args[@]}")
