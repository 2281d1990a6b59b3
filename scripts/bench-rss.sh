#!/usr/bin/env bash
# Measures the memory an idle sandbox's sbx process holds, against
# docs/performance.md: it starts `sbx run --rootfs DIR -- sleep`, waits
# IDLE seconds (default 20) for the sandbox to be idle, and reads the
# resident memory of every sbx process the sandbox keeps (their
# /proc/PID/exe is the sbx binary this script built): VmRSS, of it
# RssAnon (this process's own) and RssFile (pages of files, its
# executable's among them, which the page cache shares between every sbx
# process), and Pss. It prints the median of RUNS runs (default 3), and
# holds the process's own memory (RssAnon) against the 20 MiB target: the
# executable's pages are counted in every sbx process's RSS but held once,
# in the page cache, however many sandboxes run. With BASE=REV (a git revision) the sbx of
# that revision is measured too, alternating with this tree's, in the
# same run. Needs root; installs what is missing and starts containerd.
#
#   scripts/bench-rss.sh [RUNS]         # IDLE=20 BASE=
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root" >&2; exit 1; }
need_go
need_packages iproute2 iptables containerd runc tini busybox-static
need_containerd
runs=${1:-3}
idle=${IDLE:-20}

work=$(mktemp -d)
chmod 755 "$work"
trap 'kill $(jobs -p) 2>/dev/null || true; wait; rm -rf "$work"' EXIT
go build -o "$work/new/sbx" ./cmd/sbx
builds=(new)
if [ -n "${BASE:-}" ]; then
	mkdir -p "$work/base-src"
	git archive "$BASE" | tar -x -C "$work/base-src"
	(cd "$work/base-src" && go build -o "$work/base/sbx" ./cmd/sbx)
	builds=(base new)
fi
root="$work/rootfs"
mkdir -p "$root/bin" "$root/proc" "$root/dev" "$root/sys" "$root/tmp" "$root/etc"
cp /usr/bin/busybox "$root/bin/busybox"
ln -s busybox "$root/bin/sleep"

# field PID NAME: a kB field of /proc/PID/status or smaps_rollup.
field() { cat "/proc/$1/status" "/proc/$1/smaps_rollup" 2>/dev/null | awk -v f="$2:" '$1 == f { print $2; exit }'; }

# idle BUILD: starts a sandbox with BUILD's sbx, waits until it is idle,
# and prints the summed kB of VmRSS, RssAnon, RssFile and Pss of its sbx
# processes.
idle() {
	local bin="$work/$1/sbx" pid p exe vm=0 anon=0 file=0 pss=0
	"$bin" run --quiet --rootfs "$root" --log "$work/log.jsonl" --log-append -- sleep $((idle + 30)) >/dev/null 2>&1 &
	pid=$!
	sleep "$idle"
	for p in $(pgrep -f .); do
		exe=$(readlink "/proc/$p/exe" 2>/dev/null || true)
		[ "$exe" = "$bin" ] || continue
		vm=$((vm + $(field "$p" VmRSS))) anon=$((anon + $(field "$p" RssAnon)))
		file=$((file + $(field "$p" RssFile))) pss=$((pss + $(field "$p" Pss)))
	done
	kill -TERM "$pid"
	wait "$pid" || true
	echo "$vm $anon $file $pss"
}

median() { sort -n | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }'; }

for i in $(seq "$runs"); do
	for b in "${builds[@]}"; do
		idle "$b" >>"$work/$b.kb"
	done
done
echo "an idle sandbox's sbx processes after ${idle}s, median of $runs runs (kB):"
printf '  %-5s %9s %9s %9s %9s\n' "" VmRSS RssAnon RssFile Pss
for b in "${builds[@]}"; do
	vm=$(cut -d' ' -f1 <"$work/$b.kb" | median)
	anon=$(cut -d' ' -f2 <"$work/$b.kb" | median)
	printf '  %-5s %9d %9d %9d %9d   own (RssAnon) %s MiB (target <= 20), VmRSS %s MiB\n' "$b" "$vm" \
		"$anon" "$(cut -d' ' -f3 <"$work/$b.kb" | median)" \
		"$(cut -d' ' -f4 <"$work/$b.kb" | median)" "$(awk -v k="$anon" 'BEGIN { printf "%.1f", k / 1024 }')" \
		"$(awk -v k="$vm" 'BEGIN { printf "%.1f", k / 1024 }')"
done
