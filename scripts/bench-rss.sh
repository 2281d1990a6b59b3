#!/usr/bin/env bash
# Measures the memory an idle sandbox's sbx process holds, against
# docs/performance.md: it starts SANDBOXES sandboxes at once (default 1),
# each `sbx run --rootfs DIR -- sleep`, waits IDLE seconds (default 20)
# for them to be idle, and reads the resident memory of every sbx process
# each sandbox keeps (the `sbx run` and those of its descendants whose
# /proc/PID/exe is the sbx binary this script built): VmRSS, of it
# RssAnon (the process's own) and RssFile (pages of files, its
# executable's among them, which the page cache holds once for every sbx
# process that maps them), and Pss (each shared page divided among the
# processes that map it). It prints, per build, the median of each figure
# over the sandboxes of RUNS runs (default 3), and the total Pss of all
# the sandboxes' sbx processes divided by SANDBOXES, median of the runs:
# what each sandbox really costs the machine when that many run. The
# process's own memory (RssAnon) is held against the 20 MiB target. With
# BASE=REV (a git revision) the sbx of that revision is measured too,
# alternating with this tree's, in the same run. Every sandbox it starts
# is stopped (SIGTERM to its `sbx run`, which tears it down) before it
# exits, when interrupted too. Needs root; installs what is missing and
# starts containerd.
#
#   scripts/bench-rss.sh [RUNS]         # IDLE=20 BASE= SANDBOXES=1
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root" >&2; exit 1; }
need_go
need_packages iproute2 iptables containerd runc tini busybox-static
need_containerd
runs=${1:-3}
idle=${IDLE:-20}
sandboxes=${SANDBOXES:-1}
[[ "$sandboxes" =~ ^[1-9][0-9]*$ ]] || { echo "$0: SANDBOXES=$sandboxes: want a number of sandboxes, 1 or more" >&2; exit 2; }

work=$(mktemp -d)
chmod 755 "$work"
running=() # the pids of the sbx run processes not yet stopped
started=0

# stop_sandboxes asks every sbx run still running to end (SIGTERM: it
# tears its sandbox down) and waits for each; one killed instead would
# leave its sandbox to sbx gc.
stop_sandboxes() {
	local pid
	for pid in "${running[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${running[@]}"; do wait "$pid" 2>/dev/null || true; done
	running=()
}
cleanup() {
	trap '' INT TERM # a second ^C does not cut the teardown short
	stop_sandboxes
	kill $(jobs -p) 2>/dev/null || true
	wait
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
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
# A process that is gone counts 0.
field() { cat "/proc/$1/status" "/proc/$1/smaps_rollup" 2>/dev/null | awk -v f="$2:" '$1 == f && !n++ { v = $2 } END { print v + 0 }'; }

# tree PID: PID and its descendants.
tree() {
	local c
	echo "$1"
	for c in $(pgrep -P "$1"); do tree "$c"; done
}

# idle BUILD: starts $sandboxes sandboxes at once with BUILD's sbx (their
# command ends by itself 5 minutes after the measure, should this script
# be killed past its traps), waits until they are idle, and prints a line
# for each sandbox, the summed kB of VmRSS, RssAnon, RssFile and Pss of its
# sbx processes, then a line "total" and the summed Pss of them all. It
# stops them before it returns.
idle() {
	local bin="$work/$1/sbx" i pid p exe vm anon file pss total=0
	for i in $(seq "$sandboxes"); do
		started=$((started + 1)) # each sandbox of the script's has a log of its own
		"$bin" run --quiet --rootfs "$root" --log "$work/log-$started.jsonl" -- sleep $((idle + 300)) >"$work/run-$i.out" 2>&1 &
		running+=($!)
	done
	sleep "$idle" &
	wait $!
	for pid in "${running[@]}"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "$0: a sandbox of $1 ended before it was measured:" >&2
			cat "$work"/run-*.out >&2
			exit 1
		fi
	done
	for pid in "${running[@]}"; do
		vm=0 anon=0 file=0 pss=0
		for p in $(tree "$pid"); do
			exe=$(readlink "/proc/$p/exe" 2>/dev/null || true)
			[ "$exe" = "$bin" ] || continue
			vm=$((vm + $(field "$p" VmRSS))) anon=$((anon + $(field "$p" RssAnon)))
			file=$((file + $(field "$p" RssFile))) pss=$((pss + $(field "$p" Pss)))
		done
		total=$((total + pss))
		echo "$vm $anon $file $pss"
	done
	echo "total $total"
	stop_sandboxes
}

median() { sort -n | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }'; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

for i in $(seq "$runs"); do
	for b in "${builds[@]}"; do
		idle "$b" >"$work/$b.out"
		grep -v '^total' "$work/$b.out" >>"$work/$b.kb"
		awk -v n="$sandboxes" '$1 == "total" { printf "%d\n", $2 / n }' "$work/$b.out" >>"$work/$b.total"
	done
done
echo "$sandboxes idle sandboxes at once, each one's sbx processes after ${idle}s, medians over the sandboxes of $runs runs (kB);"
echo "Pss/sandbox: the total Pss of all their sbx processes / $sandboxes, median of the runs:"
printf '  %-5s %9s %9s %9s %9s %12s\n' "" VmRSS RssAnon RssFile Pss Pss/sandbox
for b in "${builds[@]}"; do
	vm=$(cut -d' ' -f1 <"$work/$b.kb" | median)
	anon=$(cut -d' ' -f2 <"$work/$b.kb" | median)
	per=$(median <"$work/$b.total")
	printf '  %-5s %9d %9d %9d %9d %12d   own (RssAnon) %s MiB (target <= 20), VmRSS %s MiB, Pss/sandbox %s MiB\n' "$b" "$vm" \
		"$anon" "$(cut -d' ' -f3 <"$work/$b.kb" | median)" "$(cut -d' ' -f4 <"$work/$b.kb" | median)" "$per" \
		"$(mib "$anon")" "$(mib "$vm")" "$(mib "$per")"
done
