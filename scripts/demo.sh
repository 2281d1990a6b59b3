#!/usr/bin/env bash
# sbx's main job in one command: builds sbx, makes a busybox root filesystem,
# and runs a sandbox that asks for one allowed and one blocked host, then
# shows the decisions. The "internet" is a web server (busybox httpd) in a
# network namespace this script makes and removes; no traffic leaves the
# machine. Needs root; installs what is missing (iproute2, iptables,
# containerd, runc, tini, busybox-static) and starts containerd if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

if [ "$(id -u)" -ne 0 ]; then
	echo "$0: sbx run needs root (namespaces, iptables, containerd): run it as root (as root, or with sudo where sudo is installed)" >&2
	exit 1
fi
need_go
need_packages iproute2 iptables containerd runc tini busybox-static
need_containerd

work=$(mktemp -d)
chmod 755 "$work"
up_ns=sbxdemo-up
up_veth=sbxdemo0
cleanup() {
	[ -f "$work/httpd.pid" ] && kill "$(cat "$work/httpd.pid")" 2>/dev/null || true
	ip link del "$up_veth" 2>/dev/null || true
	ip netns del "$up_ns" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
cleanup_leftover() { ip link del "$up_veth" 2>/dev/null || true; ip netns del "$up_ns" 2>/dev/null || true; }
cleanup_leftover

log "building sbx"
go build -o "$work/sbx" ./cmd/sbx

log "making a busybox root filesystem"
root="$work/rootfs"
mkdir -p "$root/bin" "$root/proc" "$root/dev" "$root/sys" "$root/tmp" "$root/etc"
cp /usr/bin/busybox "$root/bin/busybox"
for c in sh nc printf cat grep echo; do ln -s busybox "$root/bin/$c"; done

log "starting the demo upstream, demo.test, in network namespace $up_ns"
mkdir -p "$work/www"
echo "hello from demo.test" >"$work/www/index.html"
ip netns add "$up_ns"
ip link add "$up_veth" type veth peer name "${up_veth}p"
ip link set "${up_veth}p" netns "$up_ns"
ip addr add 10.214.252.1/30 dev "$up_veth"
ip link set "$up_veth" up
ip -n "$up_ns" addr add 10.214.252.2/30 dev "${up_veth}p"
ip -n "$up_ns" link set "${up_veth}p" up
ip -n "$up_ns" link set lo up
ip netns exec "$up_ns" busybox httpd -f -p 10.214.252.2:8080 -h "$work/www" &
echo $! >"$work/httpd.pid"

# Inside the sandbox: ask the gateway (HTTP_PROXY) for both hosts.
script='GW=${HTTP_PROXY#http://}
ask() { printf "GET http://%s:8080/ HTTP/1.1\r\nHost: %s:8080\r\nConnection: close\r\n\r\n" "$1" "$1" | nc ${GW%:*} ${GW##*:} | grep -E "^HTTP/|^X-Sbx|hello"; }
echo "--- allowed: demo.test"; ask demo.test
echo "--- blocked: blocked.test"; ask blocked.test'

set -x
"$work/sbx" run --rootfs "$root" --log "$work/decisions.jsonl" \
	--allow demo.test:8080 \
	--resolve demo.test=10.214.252.2 --resolve blocked.test=10.214.252.2 --allow-private 10.214.252.2/32 \
	-- sh -c "$script"
set +x
echo "--- the decisions (sbx decisions --file; the log itself is JSON Lines):"
"$work/sbx" decisions --file "$work/decisions.jsonl"
