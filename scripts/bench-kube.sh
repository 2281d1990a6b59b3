#!/usr/bin/env bash
# Starts N sandboxes (default 50) one after another on the test cluster's
# node (scripts/kube-up.sh), detached, as a user with only the rights
# docs/kubernetes.md lists; once all run, reads each sandbox's own
# memory (its gateway pod and the capture shim of its agent pod, working
# set, from the kubelet's summary API); then stops them all with one
# sbx kube stop. Prints the start latency (median, p95), the memory
# (median, max) and the time to stop them all:
#
#   scripts/bench-kube.sh [N]
#
# cmd/sbx's BenchmarkKubeClusterSandboxes does the work; this script
# brings the cluster up (and down again, if it started it) through
# scripts/kube-test.sh, which it passes its environment on to
# (SBX_KUBE_IMAGE_TAG=NAME names the images, as for the tests), and has
# build the test binary without the race detector, which would slow the
# sbx kube commands it times. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-50}
SBX_KUBE_BENCH_N=$n SBX_KUBE_TEST_RACE=0 exec scripts/kube-test.sh -test.run '^$' -test.bench '^BenchmarkKubeClusterSandboxes$' -test.benchtime 1x -test.timeout 40m
