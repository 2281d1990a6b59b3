#!/usr/bin/env bash
# Installs what sbx's tests need on a Debian or Ubuntu machine (skipping what
# is already there) and runs the whole suite: gofmt, go vet (Linux and, to
# catch a missing build tag, darwin) and go test -race.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh ./netpolicy/... # only some packages
#
# Privileged tests (named TestPrivileged*) need root and skip, saying so,
# without it. CI runs this script as root through .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*" >&2; }

# Go is not packaged by Debian in the version go.mod asks for; the machines
# sbx is developed on have it in /usr/local/go.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
	echo "scripts/test.sh: go is not installed; install Go $(sed -n 's/^go //p' go.mod) or newer from https://go.dev/dl/ and run this again" >&2
	exit 1
fi

# Debian packages the tests use: gcc for the race detector; iproute2 and
# iptables for the sandbox's privileged tests (throwaway namespaces);
# containerd, runc and busybox-static for its container tests.
packages=(gcc iproute2 iptables containerd runc busybox-static)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "scripts/test.sh: missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}" >&2
		exit 1
	fi
	log "installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The container tests need a running containerd. Debian's package starts
# it under systemd; where there is none (CI, containers), start it here.
# It keeps running after this script, as a service would.
if [ "$(id -u)" -eq 0 ] && ! timeout 5 ctr version >/dev/null 2>&1; then
	log "starting containerd (log: /var/log/sbx-containerd.log)"
	nohup containerd >/var/log/sbx-containerd.log 2>&1 </dev/null &
	for _ in $(seq 50); do
		timeout 5 ctr version >/dev/null 2>&1 && break
		sleep 0.2
	done
	if ! timeout 5 ctr version >/dev/null 2>&1; then
		echo "scripts/test.sh: containerd did not start; see /var/log/sbx-containerd.log" >&2
		exit 1
	fi
fi

pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)

log "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change these files (run gofmt -w):" >&2
	echo "$unformatted" >&2
	exit 1
fi

log "go vet (linux)"
go vet "${pkgs[@]}"
log "go vet (darwin)"
GOOS=darwin go vet "${pkgs[@]}"

log "go test -race"
go test -race -count=1 "${pkgs[@]}"
