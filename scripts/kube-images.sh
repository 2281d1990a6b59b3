#!/usr/bin/env bash
# Builds the images sbx kube's tests run on the test cluster
# (scripts/kube-up.sh) and imports them into its containerd (namespace
# k8s.io), for pods that name them with imagePullPolicy: Never:
#
#   localhost/sbx:test           sbx kube image of a static sbx built from
#                                this tree (sbx at /sbx, the host's CA
#                                certificates, no shell)
#   localhost/sbx-test-agent:1   an agent: busybox-static at /bin/busybox
#                                with all its applets as links (sh, wget,
#                                nc, cat, sleep, ...), the same static sbx
#                                at /bin/sbx (for `sbx __selftest-probe`),
#                                /tmp mode 1777, /etc/passwd with root,
#                                nobody and agent (uid 1000, home
#                                /home/agent); no entrypoint, PATH=/bin
#
#   scripts/kube-images.sh          # prints the two names, one a line
#
# sbx is built with CGO_ENABLED=0 and -buildvcs=false (so a commit that
# changes no code changes no image) into SBX_KUBE_CACHE/sbx-images. The
# archives are kept there under a key made of sbx, busybox and the
# scripts that write them, and imported only when the cluster does not have them as last
# imported: a run that finds nothing changed takes the time of a go build
# that has nothing to do (a few seconds). It also re-imports the cluster's
# own pause and busybox images when they are gone (a kubelet whose image
# garbage collection was on removes unused images when the disk is more
# than 85% full). Needs root and a running test cluster; it never starts
# or stops one.
#
# SBX_KUBE_IMAGE_TAG=NAME tags both images NAME instead (localhost/sbx:NAME,
# localhost/sbx-test-agent:NAME), so two checkouts can run their tests on
# one cluster at once without one's pods starting the other's sbx.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
. scripts/kube/kube.sh
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (the test cluster's containerd is root's); run it with sudo" >&2; exit 1; }
need_go
if [ ! -S "$kube_ctd_sock" ] || ! ctr_node version >/dev/null 2>&1; then
	echo "$0: the test cluster's containerd does not answer at $kube_ctd_sock: start the cluster with scripts/kube-up.sh" >&2
	exit 1
fi

sbx_image=localhost/sbx:${SBX_KUBE_IMAGE_TAG:-test}
agent_image=localhost/sbx-test-agent:${SBX_KUBE_IMAGE_TAG:-1}
cache=$kube_cache/sbx-images
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9 # one run at a time

log "building a static sbx"
CGO_ENABLED=0 go build -buildvcs=false -o "$cache/sbx" ./cmd/sbx

key=$( (cat "$cache/sbx" /bin/busybox scripts/kube-images.sh scripts/kube/kube.sh; echo "$sbx_image $agent_image") | sha256sum | cut -c1-16)
dir=$cache/$key
if [ ! -e "$dir/sbx.tar" ] || [ ! -e "$dir/agent.tar" ]; then
	log "writing the images' archives ($key)"
	find "$cache" -mindepth 1 -maxdepth 1 -type d -mmin +120 -exec rm -rf {} + # earlier keys', unless another checkout's of the last two hours
	w=$(mktemp -d)
	trap 'rm -rf "$w"' EXIT
	mkdir "$w/$key"
	"$cache/sbx" kube image -o "$w/$key/sbx.tar" --tag "$sbx_image" >/dev/null

	root=$w/agent
	mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/home/agent" "$root/proc" "$root/sys" "$root/dev"
	chmod 755 "$root"
	chmod 1777 "$root/tmp" "$root/home/agent"
	cp /bin/busybox "$root/bin/busybox"
	for a in $(/bin/busybox --list); do
		[ "$a" = busybox ] || ln -s busybox "$root/bin/$a"
	done
	cp "$cache/sbx" "$root/bin/sbx"
	printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' \
		'agent:x:1000:1000:agent:/home/agent:/bin/sh' >"$root/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' 'agent:x:1000:' >"$root/etc/group"
	image_archive "$root" "$agent_image" "$w/$key/agent.tar" null
	mv "$w/$key" "$dir"
fi

# image_digest REF prints the digest under which the cluster's containerd
# has REF, or nothing.
image_digest() { ctr_node images ls "name==$1" | awk 'NR == 2 { print $3 }'; }

# ensure_image REF ARCHIVE STAMP imports ARCHIVE unless the cluster has REF
# with the digest recorded in STAMP at the last import.
ensure_image() {
	local ref=$1 archive=$2 stamp=$3 have
	have=$(image_digest "$ref")
	if [ -n "$have" ] && [ -e "$stamp" ] && [ "$have" = "$(cat "$stamp")" ]; then
		return 0
	fi
	log "importing $ref into the test cluster"
	ctr_node images import "$archive" >/dev/null
	have=$(image_digest "$ref")
	[ -n "$have" ] || { echo "$0: $archive imported, but the cluster has no $ref" >&2; exit 1; }
	echo "$have" >"$stamp"
}
ensure_image "$sbx_image" "$dir/sbx.tar" "$dir/sbx.digest"
ensure_image "$agent_image" "$dir/agent.tar" "$dir/agent.digest"

# The cluster's own images, from kube-up.sh's archives, when it lost them.
base=$kube_cache/images/$(cat scripts/kube/pause.c /bin/busybox | sha256sum | cut -c1-12)
restore_image() {
	local ref=$1 archive=$2
	if [ -z "$(image_digest "$ref")" ] && [ -e "$archive" ]; then
		log "re-importing $ref, which the cluster lost"
		ctr_node images import --all-platforms "$archive" >/dev/null
	fi
}
restore_image "$kube_pause_image" "$base/pause.tar"
restore_image "$kube_busybox_image" "$base/busybox.tar"

echo "$sbx_image"
echo "$agent_image"
