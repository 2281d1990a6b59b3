#!/usr/bin/env bash
# Measures the gateway against docs/performance.md in one run, on loopback:
#   - HTTP forward req/s at 32 connections (wrk) straight to an nginx
#     upstream, through sbx gateway (decision log on), tinyproxy, Squid
#     three proxies that only relay and a fourth that adds the least of
#     sbx's work, with the ratios sbx/nginx-proxy (target >= 1.0) and
#     sbx/direct (>= 0.4), for each round and for the medians. The three
#     relays decide, check and log nothing: a second nginx as
#     a keep-alive reverse proxy, what relaying alone costs in a C event
#     loop, the ceiling a proxy reaches on the machine; scripts/barerelay,
#     the same relay in Go built as the gateway is (a goroutine a client
#     connection), so that sbx/barerelay is what sbx's own work per
#     request costs; and scripts/looprelay, the same relay in Go on an
#     event loop as nginx's, so that barerelay/looprelay is what a
#     goroutine a connection costs and looprelay/nginx-proxy what Go does;
#     and looprelay -work, which adds the least of sbx's own work (a
#     decision, its record written before the request goes upstream, a
#     close record): what sbx on an event loop would reach at most.
#     Each round also prints the CPU time sbx and the relays spent per
#     request (from /proc/PID/stat), which other work on the machine
#     moves less than their rates;
#   - CONNECT bulk throughput through sbx vs a splicing relay (>= 0.9;
#     every byte through either crosses loopback twice, so direct TCP,
#     printed too, is no fair mark) and the median time to open a tunnel
#     vs a direct connect (+150 us at most) and vs a bare Go CONNECT
#     proxy measured in the same run (what any proxy adds, so that sbx
#     minus bare is sbx's own work), from go test -bench in the gateway
#     package, median of 5 runs each (single runs vary by 20% on a 2-core
#     machine): each mode's separate runs, and in turns (the benchmarks'
#     paired runs, relay and sbx or the opens alternating within
#     milliseconds, which the machine's drift moves less), the figures
#     the targets are held against;
#   - docs/performance.md: transparent TCP bulk throughput vs a splicing
#     relay (>= 0.9), the median time to open a transparent connection by a fake
#     address's name vs a direct connect (+200 us at most), and the DNS
#     stub's queries/s (>= 50 000) and p99 (<= 1 ms), the same way; and
#     HTTPS keep-alive requests to a host the policy inspects vs the same
#     through an uninspected tunnel (>= 0.5).
# Installs wrk, tinyproxy, squid and nginx-light from Debian when missing
# (needs root for that). Every server it starts is stopped when it ends.
#
#   scripts/bench-gateway.sh [DURATION]     # DURATION of each wrk run, default 10s
#   ROUNDS=N scripts/bench-gateway.sh        # rounds of the HTTP runs, default 3
#   PROFILE=1 scripts/bench-gateway.sh       # and where sbx's time goes
#
# With PROFILE=1, after the rounds, one more wrk run through sbx has perf
# record the gateway (perf from linux-perf, installed when missing), and
# the script prints its samples by binary (kernel or sbx) and its top
# symbols.
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:-10s}

. scripts/lib.sh
need_go
fresh=$(missing_packages wrk tinyproxy squid nginx-light)
need_packages wrk tinyproxy squid nginx-light
if [ -n "$fresh" ]; then
	# Debian starts these services on install; the benchmark runs its own.
	for svc in tinyproxy squid nginx; do
		systemctl stop "$svc" 2>/dev/null || service "$svc" stop 2>/dev/null || true
	done
fi

work=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	[ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
	[ -f "$work/relay.pid" ] && kill "$(cat "$work/relay.pid")" 2>/dev/null || true
	[ -f "$work/squid.pid" ] && kill "$(cat "$work/squid.pid")" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
# A signal ends the script through exit, so that cleanup runs: bash
# does not run an EXIT trap when a signal kills it.
trap 'exit 130' INT
trap 'exit 143' TERM

up=127.0.0.1:18081
sbx=127.0.0.1:18128
tiny=127.0.0.1:18129
relay=127.0.0.1:18131
bare=127.0.0.1:18132
loop=127.0.0.1:18133
loopw=127.0.0.1:18134
squidp=127.0.0.1:18130

# start_nginx NAME BLOCK starts an nginx of one worker with its files in
# $work/NAME, whose http block ends with BLOCK; its pid is in
# $work/NAME.pid.
start_nginx() {
	local dir="$work/$1"
	mkdir -p "$dir"
	cat >"$work/$1.conf" <<EOF
worker_processes 1;
pid $work/$1.pid;
error_log $dir/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir; proxy_temp_path $dir; fastcgi_temp_path $dir;
  uwsgi_temp_path $dir; scgi_temp_path $dir;
  keepalive_requests 1000000;
$2
}
EOF
	nginx -c "$work/$1.conf"
}

# nginx: a small static answer, as an API would give.
mkdir -p "$work/www"
printf 'hello from upstream\n' >"$work/www/index.html"
chmod 755 "$work" "$work/www" # nginx's workers run as www-data
start_nginx nginx "  server { listen $up; root $work/www; }"

# nginx again, as a reverse proxy to the upstream with kept connections,
# with one worker of its own: a proxy that only relays. It takes the
# absolute-form requests wrk sends a proxy as any other request.
start_nginx relay "  upstream up { server $up; keepalive 64; }
  server {
    listen $relay;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\"; }
  }"

go build -o "$work/sbx" ./cmd/sbx
go build -o "$work/barerelay" ./scripts/barerelay
"$work/barerelay" -listen "$bare" -upstream "$up" &
bare_pid=$!
pids+=($!)
go build -o "$work/looprelay" ./scripts/looprelay
"$work/looprelay" -listen "$loop" -upstream "$up" &
loop_pid=$!
pids+=($!)
"$work/looprelay" -listen "$loopw" -upstream "$up" -work "$work/looprelay.jsonl" &
loopw_pid=$!
pids+=($!)
# Every record written, no rate or size limit: docs/performance.md measures with the log on.
"$work/sbx" gateway --listen "$sbx" --allow "$up" --log "$work/decisions.jsonl" --log-rate 0 --log-max-size 0 >"$work/sbx.out" 2>&1 &
sbx_pid=$!
pids+=($!)

cat >"$work/tinyproxy.conf" <<EOF
Port ${tiny##*:}
Listen 127.0.0.1
MaxClients 1024
Allow 127.0.0.1
LogLevel Critical
PidFile "$work/tinyproxy.pid"
EOF
tinyproxy -d -c "$work/tinyproxy.conf" >/dev/null 2>&1 &
pids+=($!)

mkdir -p "$work/squid"
chown proxy "$work/squid" 2>/dev/null || true # Squid's workers run as proxy
cat >"$work/squid.conf" <<EOF
http_port $squidp
http_access allow localhost
http_access deny all
cache deny all
cache_mem 0 MB
access_log none
cache_log $work/squid/cache.log
pid_filename $work/squid.pid
coredump_dir $work/squid
workers 1
EOF
squid -N -f "$work/squid.conf" >/dev/null 2>&1 &
pids+=($!)

# wrk sends absolute-form requests to a proxy with this script.
cat >"$work/proxy.lua" <<EOF
wrk.path = "http://$up/"
wrk.headers["Host"] = "$up"
EOF

wait_port() {
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench-gateway.sh: nothing listens on $1" >&2
	return 1
}
for a in "$up" "$sbx" "$tiny" "$squidp" "$relay" "$bare" "$loop" "$loopw"; do wait_port "$a"; done

rps() { # URL [proxy.lua]
	local out
	if [ $# -eq 2 ]; then
		out=$(wrk -t2 -c32 -d"$dur" -s "$2" "$1")
	else
		out=$(wrk -t2 -c32 -d"$dur" "$1")
	fi
	if echo "$out" | grep -q 'Non-2xx'; then
		echo "bench-gateway.sh: non-2xx answers from $1:" >&2
		echo "$out" >&2
		return 1
	fi
	echo "$out" | awk '/requests in/ {print $1}' >"$work/last.n"
	echo "$out" | awk '/Requests\/sec/ {print $2}'
}

# cpu_ticks PID: the user and system CPU time of process PID, all its
# threads, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# cpu_per_request PID TICKS_BEFORE: the CPU microseconds process PID
# spent per request of the wrk run just done (rps), since TICKS_BEFORE.
cpu_per_request() {
	awk -v t="$(($(cpu_ticks "$1") - $2))" -v hz="$(getconf CLK_TCK)" -v n="$(cat "$work/last.n")" \
		'BEGIN { printf "%.1f", t * 1e6 / hz / n }'
}

# measure PID ADDR: the req/s of wrk through the proxy at ADDR and the
# CPU microseconds its process PID spent per request, on one line.
measure() {
	local c0 r
	c0=$(cpu_ticks "$1")
	r=$(rps "http://$2" "$work/proxy.lua") || return # a failure ends the script, as set -e would
	echo "$r $(cpu_per_request "$1" "$c0")"
}

# Each is measured ROUNDS times, one after another, and the medians are
# compared: the machine's load drifts, and turns share it.
rounds=${ROUNDS:-3}
echo "HTTP forward, wrk -c32 -d$dur, nginx upstream on loopback, median of $rounds rounds:"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
for round in $(seq "$rounds"); do
	relay_pid=$(pgrep -P "$(cat "$work/relay.pid")" | head -1) # its one worker
	d=$(rps "http://$up/")
	out=$(measure "$sbx_pid" "$sbx")
	read -r s sc <<<"$out"
	t=$(rps "http://$tiny" "$work/proxy.lua")
	q=$(rps "http://$squidp" "$work/proxy.lua")
	out=$(measure "$relay_pid" "$relay")
	read -r n nc <<<"$out"
	out=$(measure "$bare_pid" "$bare")
	read -r b bc <<<"$out"
	out=$(measure "$loop_pid" "$loop")
	read -r l lc <<<"$out"
	out=$(measure "$loopw_pid" "$loopw")
	read -r w wc <<<"$out"
	echo "$w" >>"$work/loopw.rps"
	echo "$n" >>"$work/relay.rps"
	echo "$b" >>"$work/bare.rps"
	echo "$l" >>"$work/loop.rps"
	echo "$d" >>"$work/direct.rps"
	echo "$s" >>"$work/sbx.rps"
	echo "$t" >>"$work/tiny.rps"
	echo "$q" >>"$work/squid.rps"
	printf '  round %d: direct %.0f, sbx %.0f, tinyproxy %.0f, squid %.0f, nginx proxy %.0f, barerelay %.0f, looprelay %.0f, looprelay -work %.0f req/s: sbx/nginx-proxy %sx, sbx/direct %sx, sbx/barerelay %sx, looprelay/nginx-proxy %sx, looprelay-work/nginx-proxy %sx\n' \
		"$round" "$d" "$s" "$t" "$q" "$n" "$b" "$l" "$w" "$(ratio "$s" "$n")" "$(ratio "$s" "$d")" "$(ratio "$s" "$b")" "$(ratio "$l" "$n")" "$(ratio "$w" "$n")"
	printf '           CPU per request: sbx %s us, nginx proxy %s us, barerelay %s us, looprelay %s us, looprelay -work %s us\n' "$sc" "$nc" "$bc" "$lc" "$wc"
done
median() { sort -g "$1" | awk '{ t[NR] = $1 } END { print t[int((NR + 1) / 2)] }'; }
direct=$(median "$work/direct.rps")
via_sbx=$(median "$work/sbx.rps")
via_tiny=$(median "$work/tiny.rps")
via_squid=$(median "$work/squid.rps")
via_relay=$(median "$work/relay.rps")
via_bare=$(median "$work/bare.rps")
via_loop=$(median "$work/loop.rps")
via_loopw=$(median "$work/loopw.rps")
echo "  medians:"
printf '  %-11s %10.0f req/s\n' direct "$direct"
printf '  %-11s %10.0f req/s  %sx direct\n' sbx "$via_sbx" "$(ratio "$via_sbx" "$direct")"
printf '  %-11s %10.0f req/s  %sx direct\n' tinyproxy "$via_tiny" "$(ratio "$via_tiny" "$direct")"
printf '  %-11s %10.0f req/s  %sx direct\n' squid "$via_squid" "$(ratio "$via_squid" "$direct")"
printf '  %-11s %10.0f req/s  %sx direct, %sx squid (relays only: the ceiling)\n' nginx-proxy "$via_relay" "$(ratio "$via_relay" "$direct")" "$(ratio "$via_relay" "$via_squid")"
printf '  %-11s %10.0f req/s  %sx direct (the same relay in Go, a goroutine a connection)\n' barerelay "$via_bare" "$(ratio "$via_bare" "$direct")"
printf '  %-11s %10.0f req/s  %sx direct (the same relay in Go, on an event loop)\n' looprelay "$via_loop" "$(ratio "$via_loop" "$direct")"
printf '  %-11s %10.0f req/s  %sx direct (looprelay with the least of sbx'"'"'s work)\n' "loop -work" "$via_loopw" "$(ratio "$via_loopw" "$direct")"
printf '  sbx/nginx-proxy  %sx, sbx/direct %sx   (targets: >= 1.0, >= 0.4)\n' "$(ratio "$via_sbx" "$via_relay")" "$(ratio "$via_sbx" "$direct")"
printf '  sbx/squid %sx, sbx/barerelay %sx, barerelay/looprelay %sx, looprelay/nginx-proxy %sx, looprelay-work/nginx-proxy %sx\n' \
	"$(ratio "$via_sbx" "$via_squid")" "$(ratio "$via_sbx" "$via_bare")" "$(ratio "$via_bare" "$via_loop")" "$(ratio "$via_loop" "$via_relay")" "$(ratio "$via_loopw" "$via_relay")"
logged=$(grep -c '"event":"decision"' "$work/decisions.jsonl" || true)
echo "  decision records written by sbx: $logged"

if [ -n "${PROFILE:-}" ]; then
	need_packages linux-perf
	echo
	echo "Where sbx gateway's time goes: perf record -g during one more wrk run through it:"
	wrk -t2 -c32 -d"$dur" -s "$work/proxy.lua" "http://$sbx" >"$work/profile-wrk.txt" &
	wrk_pid=$!
	sleep 1
	secs=${dur%s}
	[[ "$secs" =~ ^[0-9]+$ ]] && [ "$secs" -gt 2 ] || secs=3
	perf record -q -F 999 -g -p "$sbx_pid" -o "$work/perf.data" -- sleep $((secs - 2)) 2>/dev/null
	wait "$wrk_pid"
	echo "  $(awk '/Requests\/sec/ {print $2}' "$work/profile-wrk.txt") req/s while recorded; samples by binary:"
	# awk reads perf's whole report (a head that stopped early would
	# end the script with SIGPIPE, under pipefail).
	perf report -i "$work/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | awk '/^ *[0-9.]+%/ { print "   ", $0 }'
	echo "  top symbols (self):"
	perf report -i "$work/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null | awk '/^ *[0-9.]+%/ && n++ < 30 { print "   ", $0 }'
fi

echo
echo "CONNECT tunnels, go test -bench (gateway package), median of 5 runs each:"
go test ./gateway -run '^$' -bench 'Tunnel' -benchtime 2s -count 5 >"$work/tunnel.txt"
# awk functions for go test -bench output: the median of n values, and a
# line's VALUE of UNIT.
benchawk='
function median(a, n,    i, j, t) {
	for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
	return a[int((n + 1) / 2)]
}
function value(unit,    i) { for (i = 1; i <= NF; i++) if ($(i+1) == unit) return $i }
function need(n, what) { if (n == 0) { printf "bench-gateway.sh: no %s in the benchmarks'"'"' output\n", what > "/dev/stderr"; exit 1 } }
'
awk "$benchawk"'
/TunnelThroughput\/direct/ { d[++nd] = value("MB/s") }
/TunnelThroughput\/relay/  { r[++nr] = value("MB/s") }
/TunnelThroughput\/sbx/    { s[++ns] = value("MB/s") }
/TunnelOpen\/direct/       { od[++nod] = value("p50-µs") }
/TunnelOpen\/bare/         { ob[++nob] = value("p50-µs") }
/TunnelOpen\/sbx/          { os[++nos] = value("p50-µs") }
/TunnelThroughput\/paired/ { pr[++npr] = value("sbx/relay") }
/TunnelOpen\/paired/       { pa[++npa] = value("added-µs"); pb[++npb] = value("bare-added-µs"); po[++npo] = value("own-µs") }
END {
	need(nd * nr * ns, "throughput figure"); need(nod * nob * nos, "open figure"); need(npr * npa * npb * npo, "paired figure")
	dm = median(d, nd); rm = median(r, nr); sm = median(s, ns); odm = median(od, nod); obm = median(ob, nob); osm = median(os, nos)
	printf "  throughput  direct %.0f MB/s, splicing relay %.0f MB/s, sbx %.0f MB/s (separate runs): sbx/relay %.3fx, sbx/direct %.3fx\n", dm, rm, sm, sm / rm, sm / dm
	printf "    in turns with the relay (32 MiB each, the median of the rounds'"'"' ratios): sbx/relay %.3fx   (target >= 0.9x)\n", median(pr, npr)
	printf "  tunnel open median: direct %d us, bare Go CONNECT proxy %d us, sbx %d us (separate runs)\n", odm, obm, osm
	printf "    added over direct: sbx %d us, bare proxy %d us; sbx over the bare proxy %d us\n", osm - odm, obm - odm, osm - obm
	printf "    in turns (the medians of the rounds'"'"' differences): sbx adds %d us   (target <= 150 us), the bare proxy %d us; sbx over the bare proxy %d us (its own work)\n", median(pa, npa), median(pb, npb), median(po, npo)
}' "$work/tunnel.txt"

echo
echo "Capture (docs/performance.md), go test -bench (gateway package), median of 5 runs each:"
go test ./gateway -run '^$' -bench 'Transparent|DNSStub' -benchtime 2s -count 5 >"$work/capture.txt"
awk "$benchawk"'
/TransparentThroughput\/direct/ { d[++nd] = value("MB/s") }
/TransparentThroughput\/relay/  { r[++nr] = value("MB/s") }
/TransparentThroughput\/sbx/    { s[++ns] = value("MB/s") }
/TransparentOpen\/direct/       { od[++nod] = value("p50-µs") }
/TransparentOpen\/sbx/          { os[++nos] = value("p50-µs") }
/DNSStub/                        { q[++nq] = value("queries/s"); p[++np] = value("p99-µs") }
/TransparentThroughput\/paired/ { pr[++npr] = value("sbx/relay") }
/TransparentOpen\/paired/       { pa[++npa] = value("added-µs") }
END {
	need(nd * nr * ns, "throughput figure"); need(nod * nos, "open figure"); need(npr * npa, "paired figure"); need(nq * np, "DNS figure")
	dm = median(d, nd); rm = median(r, nr); sm = median(s, ns); odm = median(od, nod); osm = median(os, nos)
	printf "  transparent throughput  direct %.0f MB/s, splicing relay %.0f MB/s, sbx %.0f MB/s (separate runs): sbx/relay %.3fx, sbx/direct %.3fx\n", dm, rm, sm, sm / rm, sm / dm
	printf "    in turns with the relay: sbx/relay %.3fx   (target >= 0.9x)\n", median(pr, npr)
	printf "  transparent open median: direct %d us, sbx %d us, added %d us (separate runs)\n", odm, osm, osm - odm
	printf "    in turns: sbx adds %d us   (target <= 200 us added)\n", median(pa, npa)
	printf "  DNS stub: %.0f queries/s, p99 %d us   (targets >= 50000/s, <= 1000 us)\n", median(q, nq), median(p, np)
}' "$work/capture.txt"

echo
echo "TLS inspection (docs/performance.md), go test -bench (gateway package), median of 5 runs each:"
go test ./gateway -run '^$' -bench 'InspectedRequests' -benchtime 2s -count 5 >"$work/inspect.txt"
awk "$benchawk"'
/InspectedRequests\/tunnel/    { t[++nt] = value("requests/s") }
/InspectedRequests\/inspected/ { i[++ni] = value("requests/s") }
END {
	need(nt * ni, "inspected figure")
	tm = median(t, nt); im = median(i, ni)
	printf "  HTTPS keep-alive requests: tunnel %.0f/s, inspected %.0f/s: inspected/tunnel %.3fx   (target >= 0.5x)\n", tm, im, im / tm
}' "$work/inspect.txt"
