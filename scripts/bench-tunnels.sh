#!/usr/bin/env bash
# Measures the gateway's memory with many idle CONNECT tunnels against
# docs/performance.md (10 000 idle tunnels: RSS <= 200 MiB): starts sbx gateway
# on loopback, and scripts/tunnelload opens N tunnels through it to an
# upstream of its own on 127.0.0.2, then prints the gateway's RSS before
# and with them open, and per tunnel. No traffic leaves loopback.
#
# An idle tunnel holds two descriptors in the gateway (client and
# upstream) and two in tunnelload. Where the open-file limit cannot be
# raised far enough (a container without CAP_SYS_RESOURCE), N is lowered
# to fit and the script says so; the per-tunnel figure then gives the
# estimate for 10 000.
#
#   scripts/bench-tunnels.sh [N]     # default 10000
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_go
n=${1:-10000}
ulimit -n $((4 * n + 1024)) 2>/dev/null || ulimit -n "$(ulimit -Hn)"
fit=$((($(ulimit -n) - 1024) / 4))
if [ "$n" -gt "$fit" ]; then
	echo "==> the open-file limit is $(ulimit -n) and cannot be raised here: measuring $fit tunnels instead of $n" >&2
	n=$fit
fi

work=$(mktemp -d)
gw=
cleanup() {
	[ -n "$gw" ] && kill "$gw" 2>/dev/null && wait "$gw" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/sbx" ./cmd/sbx
go build -o "$work/tunnelload" ./scripts/tunnelload

port=$((20000 + RANDOM % 20000))
"$work/sbx" gateway --listen "127.0.0.1:$port" --allow '127.0.0.2:*' --allow-private 127.0.0.0/8 \
	--log "$work/decisions.jsonl" >"$work/gateway.out" 2>&1 &
gw=$!
for _ in $(seq 50); do
	grep -q "proxy on" "$work/gateway.out" && break
	sleep 0.1
done
grep -q "proxy on" "$work/gateway.out" || { cat "$work/gateway.out" >&2; exit 1; }
"$work/tunnelload" -proxy "127.0.0.1:$port" -n "$n" -pid "$gw"
