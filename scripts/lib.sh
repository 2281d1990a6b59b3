# Shared by the scripts: sourced, not run.

# log says what a script does next, with the time since its first step
# (SECONDS), so that a slow CI run's log shows where its time went.
log() { printf '==> [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

# need_go puts Go on PATH or says how to get it. Debian's own Go is older
# than go.mod asks for; the machines sbx is developed on have it in
# /usr/local/go.
need_go() {
	if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	fi
	if ! command -v go >/dev/null 2>&1; then
		echo "$0: go is not installed; install Go $(sed -n 's/^go //p' go.mod) or newer from https://go.dev/dl/ and run this again" >&2
		exit 1
	fi
}

# missing_packages prints those of the Debian packages it is given that
# are not installed.
missing_packages() {
	local p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
	done
}

# need_packages installs the Debian packages it is given that are missing.
need_packages() {
	local missing
	mapfile -t missing < <(missing_packages "$@")
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		echo "$0: missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install -y ${missing[*]}" >&2
		exit 1
	fi
	log "installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# need_containerd starts containerd when it does not answer. Debian's
# package starts it under systemd; where there is none (CI, containers),
# it is started here and keeps running, as a service would.
need_containerd() {
	[ "$(id -u)" -eq 0 ] || return 0
	timeout 5 ctr version >/dev/null 2>&1 && return 0
	log "starting containerd (log: /var/log/sbx-containerd.log)"
	nohup containerd >/var/log/sbx-containerd.log 2>&1 </dev/null &
	for _ in $(seq 50); do
		timeout 5 ctr version >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	echo "$0: containerd did not start; see /var/log/sbx-containerd.log" >&2
	exit 1
}

# need_docker starts dockerd when Docker does not answer. Debian's
# docker.io starts it under systemd; where there is none (CI, containers),
# it is started here, on the containerd that need_containerd started, and
# keeps running, as a service would. sbx gives its containers networks of
# its own, so this dockerd makes no bridge and writes no iptables rules
# of its own into the host's tables (the privileged tests check that sbx
# leaves those as it found them).
need_docker() {
	[ "$(id -u)" -eq 0 ] || return 0
	docker_answers && return 0
	log "starting dockerd (log: /var/log/sbx-dockerd.log)"
	nohup dockerd --containerd=/run/containerd/containerd.sock --iptables=false --ip-forward=false --bridge=none \
		>/var/log/sbx-dockerd.log 2>&1 </dev/null &
	for _ in $(seq 100); do
		docker_answers && return 0
		sleep 0.2
	done
	echo "$0: dockerd did not start; see /var/log/sbx-dockerd.log" >&2
	exit 1
}

# docker_answers reports whether a Docker daemon answers (DOCKER_HOST, or
# its default socket).
docker_answers() {
	timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}
