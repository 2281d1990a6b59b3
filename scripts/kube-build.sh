#!/usr/bin/env bash
# Builds the test cluster's programs from Go module sources, or finds them
# built: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# the kubelet, kubectl (the tests run `kubectl exec`) and kube-router, at
# the versions scripts/kube/kube.sh names, through the wrapper modules in
# scripts/kube/ (which keep them out of sbx's own go.mod). They are cached
# under SBX_KUBE_CACHE (/var/cache/sbx-kube), one directory per version,
# with the Go build and module caches they were built with: a run that
# finds them there does nothing.
#
#   scripts/kube-build.sh   # scripts/kube-up.sh runs it; scripts/test.sh
#                           # starts it beside the Go tests
#
# From empty caches the build takes about 20 CPU minutes, some 11 minutes
# of 2 idle cores (docs/kubernetes.md has the figures per program). It is
# nice'd, so that beside the Go tests it takes only the CPU they leave.
# Two runs at once take turns (a lock in the cache); one that is stopped
# leaves no half-written program behind, and the next one goes on from
# the Go build cache.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
. scripts/kube/kube.sh
need_go

mkdir -p "$kube_cache/bin"
exec 9>"$kube_cache/build.lock"
flock 9

export GOCACHE=$kube_cache/gocache GOMODCACHE=$kube_cache/gomod GOTOOLCHAIN=local
# -trimpath and -s -w: smaller programs and shorter links, nothing the
# test cluster needs is lost (no debugger is run on them).
export GOFLAGS="-mod=readonly -trimpath"
strip_ldflags="-s -w"
w=$(mktemp -d "$kube_cache/bin/.build.XXXXXX")
trap 'rm -rf "$w"' EXIT

# timed WHAT CMD...: CMD, logging how long it took.
timed() {
	local what=$1 s
	shift
	s=$(date +%s)
	"$@"
	log "built $what in $(($(date +%s) - s)) s"
}

if [ ! -x "$kube_bin_etcd/etcd" ]; then
	log "building etcd $ETCD_VERSION (cached in $kube_bin_etcd)"
	(cd scripts/kube/etcd && timed etcd nice -n 19 go build -ldflags "$strip_ldflags" -o "$w/etcd" go.etcd.io/etcd/server/v3)
	mkdir -p "$kube_bin_etcd"
	mv "$w/etcd" "$kube_bin_etcd/etcd"
fi

# The five Kubernetes programs in one go build: the go command links one
# while it compiles the next one's packages. Without the version in the
# binaries, the API server says v0.0.0-master and kubectl cannot parse it.
k8s_programs=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
missing=()
for c in "${k8s_programs[@]}"; do
	[ -x "$kube_bin_k8s/$c" ] || missing+=("k8s.io/kubernetes/cmd/$c")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "building ${missing[*]##*/} $KUBE_VERSION (cached in $kube_bin_k8s)"
	minor=${KUBE_VERSION#v1.}
	minor=${minor%%.*}
	kube_ldflags="$strip_ldflags -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
	(cd scripts/kube/k8s && timed Kubernetes nice -n 19 go build -ldflags "$kube_ldflags" -o "$w/" "${missing[@]}")
	mkdir -p "$kube_bin_k8s"
	for p in "${missing[@]}"; do
		mv "$w/${p##*/}" "$kube_bin_k8s/"
	done
fi

if [ ! -x "$kube_bin_router/kube-router" ]; then
	log "building kube-router $KUBE_ROUTER_VERSION (cached in $kube_bin_router)"
	# Its own module, at a pinned version: go install with @version reads
	# kube-router's go.mod and go.sum, not a wrapper's (and refuses -mod).
	GOFLAGS=-trimpath GOBIN="$w" timed kube-router nice -n 19 go install -ldflags "$strip_ldflags" \
		"github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
	mkdir -p "$kube_bin_router"
	mv "$w/kube-router" "$kube_bin_router/kube-router"
fi
