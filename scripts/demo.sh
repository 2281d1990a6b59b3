#!/usr/bin/env bash
# Builds sbx and shows what it decides for one allowed and one blocked
# request under a policy that allows only the npm registry. Today this asks
# the policy engine (sbx policy check), which sends no traffic and does no
# DNS; when the sandbox lands it will run a real one.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || {
	echo "scripts/demo.sh: go is not installed; install Go $(sed -n 's/^go //p' go.mod) or newer and run this again" >&2
	exit 1
}

bin=$(mktemp -d)/sbx
trap 'rm -rf "$(dirname "$bin")"' EXIT
go build -o "$bin" ./cmd/sbx

run() {
	printf '$ sbx %s\n' "$*"
	"$bin" "$@"
}
run policy check --allow registry.npmjs.org https://registry.npmjs.org/
run policy check --allow registry.npmjs.org https://example.com/
