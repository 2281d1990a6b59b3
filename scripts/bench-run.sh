#!/usr/bin/env bash
# Measures sbx run's start-to-exit time against docs/performance.md: the median
# wall time of `sbx run --rootfs DIR -- true` over RUNS runs next to
# `ctr run --rm --rootfs DIR` in the same run, and their ratio (target
# <= 1.3), and, for the reader, next to `ctr run --rm --seccomp`: sbx
# applies containerd's default seccomp profile, which costs plain ctr
# 15-30 ms here. Then, per docs/performance.md, `sbx run --runtime docker
# --image IMG -- true` next to `docker run --rm --network none IMG true`
# in the same run (target <= 1.3), IMG being the same busybox root
# imported into Docker. With BASE=REV (a git revision) the sbx of that
# revision runs too, alternating with this tree's, so that a change is
# measured before and after in the same run. Needs root; installs what is
# missing and starts containerd and dockerd.
#
#   scripts/bench-run.sh [RUNS]     # default 15; BASE=
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root" >&2; exit 1; }
need_go
need_packages iproute2 iptables containerd runc tini busybox-static docker.io
need_containerd
need_docker
runs=${1:-15}

work=$(mktemp -d)
chmod 755 "$work"
image=sbxbench/busybox:$$
trap 'rm -rf "$work"; docker rmi -f "$image" >/dev/null 2>&1 || true' EXIT
go build -o "$work/sbx" ./cmd/sbx
if [ -n "${BASE:-}" ]; then
	mkdir -p "$work/base-src"
	git archive "$BASE" | tar -x -C "$work/base-src"
	(cd "$work/base-src" && go build -o "$work/base-sbx" ./cmd/sbx)
fi
root="$work/rootfs"
mkdir -p "$root/bin" "$root/proc" "$root/dev" "$root/sys" "$root/tmp" "$root/etc"
cp /usr/bin/busybox "$root/bin/busybox"
ln -s busybox "$root/bin/true"
tar -C "$root" -c . | docker import - "$image" >/dev/null

# took CMD...: the wall time of CMD in microseconds.
took() {
	local s e
	s=$(date +%s%N)
	"$@" >/dev/null 2>&1 || { echo "$0: failed: $*" >&2; exit 1; }
	e=$(date +%s%N)
	echo $(((e - s) / 1000))
}
median() { sort -n | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }'; }

# One warm-up of each, so neither pays for cold caches alone.
"$work/sbx" run --quiet --rootfs "$root" --log "$work/log.jsonl" --log-append -- true
[ -z "${BASE:-}" ] || "$work/base-sbx" run --quiet --rootfs "$root" --log "$work/log.jsonl" --log-append -- true
ctr -n sbxbench run --rm --rootfs "$root" sbxbench-warm /bin/true
"$work/sbx" run --quiet --runtime docker --image "$image" --log "$work/log.jsonl" --log-append -- true
docker run --rm --network none "$image" /bin/true

# The two alternate, so that both see the same machine (its load drifts).
for i in $(seq "$runs"); do
	took "$work/sbx" run --quiet --rootfs "$root" --log "$work/log.jsonl" --log-append -- true >>"$work/sbx.us"
	[ -z "${BASE:-}" ] || took "$work/base-sbx" run --quiet --rootfs "$root" --log "$work/log.jsonl" --log-append -- true >>"$work/base.us"
	took ctr -n sbxbench run --rm --rootfs "$root" "sbxbench-$$-$i" /bin/true >>"$work/ctr.us"
	took ctr -n sbxbench run --rm --seccomp --rootfs "$root" "sbxbench-$$-s$i" /bin/true >>"$work/ctrsec.us"
	took "$work/sbx" run --quiet --runtime docker --image "$image" --log "$work/log.jsonl" --log-append -- true >>"$work/sbxdocker.us"
	took docker run --rm --network none "$image" /bin/true >>"$work/docker.us"
done
sbxdocker_us=$(median <"$work/sbxdocker.us")
docker_us=$(median <"$work/docker.us")
sbx_us=$(median <"$work/sbx.us")
ctr_us=$(median <"$work/ctr.us")
ctrsec_us=$(median <"$work/ctrsec.us")
echo "start to exit, median of $runs runs each, alternating:"
printf '  ctr run --rm --rootfs DIR     %7d us\n' "$ctr_us"
printf '  sbx run --rootfs DIR -- true  %7d us   %sx ctr (target <= 1.3x)\n' "$sbx_us" \
	"$(awk -v a="$sbx_us" -v b="$ctr_us" 'BEGIN { printf "%.2f", a / b }')"
# For the reader: containerd's default seccomp profile, which every sbx
# sandbox runs under (docs/network.md) and plain ctr run does not, is part
# of the difference.
printf '  ctr run --rm --seccomp        %7d us   (sbx is %sx this)\n' "$ctrsec_us" \
	"$(awk -v a="$sbx_us" -v b="$ctrsec_us" 'BEGIN { printf "%.2f", a / b }')"
if [ -n "${BASE:-}" ]; then
	base_us=$(median <"$work/base.us")
	printf '  sbx of %s, the same           %7d us   %sx ctr\n' "$BASE" "$base_us" \
		"$(awk -v a="$base_us" -v b="$ctr_us" 'BEGIN { printf "%.2f", a / b }')"
fi
printf '  docker run --rm --network none           %7d us\n' "$docker_us"
printf '  sbx run --runtime docker --image -- true  %7d us   %sx docker (target <= 1.3x)\n' "$sbxdocker_us" \
	"$(awk -v a="$sbxdocker_us" -v b="$docker_us" 'BEGIN { printf "%.2f", a / b }')"
