#!/usr/bin/env bash
# Measures sbx audit over a 1 GiB decision log against docs/performance.md: at
# most 10 s and 200 MiB of memory (maximum resident set size), streamed.
# The log is synthetic (scripts/auditlog: about 2.4 million records of a
# busy sandbox, with far more distinct paths than audit keeps). Each of
# the report (json, html), --expect and --suggest is timed with
# /usr/bin/time next to two baselines measured in the same run on the
# same file: reading it (cat > /dev/null, the disk and page cache) and
# counting its lines (wc -l, the least a line-by-line reader does).
#
#   scripts/bench-audit.sh [SIZE_BYTES]   # default 1073741824 (1 GiB)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
need_go
need_packages time
size=${1:-1073741824}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/sbx" ./cmd/sbx
go build -o "$work/auditlog" ./scripts/auditlog
log "writing a $size-byte decision log"
"$work/auditlog" -size "$size" -o "$work/decisions.jsonl"
cat >"$work/policy.yaml" <<'POLICY'
version: 1
rules:
  - {host: "*.registry.npmjs.org", action: allow}
  - {host: "*.githubusercontent.com", ports: [80, 443], action: allow}
POLICY
cat "$work/decisions.jsonl" >/dev/null # warm the page cache for all

# measure NAME CMD...: prints "NAME seconds maxrss_kib"; CMD's exit code
# may be 0 or 1 (--expect lists what the policy does not allow).
measure() {
	local name=$1
	shift
	/usr/bin/time -f '%e %M' -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || {
		code=$?
		[ "$code" -eq 1 ] || { echo "$0: $name failed ($code):" >&2; cat "$work/stderr" >&2; exit 1; }
	}
	echo "$name $(tail -n 1 "$work/time")" # time adds a line before when CMD exits 1
}

{
	measure "cat" cat "$work/decisions.jsonl"
	measure "wc -l" wc -l "$work/decisions.jsonl"
	measure "report json" "$work/sbx" audit --format json "$work/decisions.jsonl"
	measure "report html" "$work/sbx" audit --format html "$work/decisions.jsonl"
	measure "--expect" "$work/sbx" audit --expect "$work/policy.yaml" "$work/decisions.jsonl"
	measure "--suggest" "$work/sbx" audit --suggest "$work/decisions.jsonl"
} >"$work/results"

mib=$(awk -v s="$size" 'BEGIN { printf "%.0f", s / 1048576 }')
records=$(wc -l <"$work/decisions.jsonl")
awk -v mib="$mib" -v records="$records" '
	$1 == "cat" { base = $2 }
	$1 == "wc" { wc = $3 }
	{ name = $1; for (i = 2; i < NF - 1; i++) name = name " " $i; t[NR] = $(NF - 1); m[NR] = $NF; n[NR] = name }
	END {
		printf "sbx audit over a %d MiB decision log (%d records); targets: <= 10 s, <= 200 MiB\n", mib, records
		printf "%-12s %8s %10s %10s %12s\n", "what", "seconds", "MiB/s", "max MiB", "vs cat"
		fail = 0
		for (i = 1; i <= NR; i++) {
			s = t[i] > 0 ? t[i] : 0.01
			printf "%-12s %8.2f %10.0f %10.1f %11.1fx", n[i], t[i], mib / s, m[i] / 1024, s / (base > 0 ? base : 0.01)
			if (n[i] != "cat" && n[i] != "wc -l") {
				ok = t[i] <= 10 * mib / 1024 && m[i] / 1024 <= 200
				if (!ok) fail = 1
				printf "  %s", ok ? "ok" : "OVER TARGET"
			}
			printf "\n"
		}
		exit fail
	}' "$work/results"
