#!/usr/bin/env bash
# Stops the test cluster that scripts/kube-up.sh started, also after a
# failed or half-finished bring-up, and removes its state, keeping the
# logs (SBX_KUBE_DIR/logs). The host's sysctls, iptables rules and
# containerd were never touched: the cluster ran in a network namespace
# and mount namespaces of its own, with a containerd of its own, and all
# of those end here.
#
#   scripts/kube-down.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
. scripts/kube/kube.sh
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root; run it with sudo" >&2; exit 1; }
d=$kube_dir
[ -d "$d" ] || { log "no test cluster in $d"; exit 0; }

pid_of() { awk -v n="$1" '$1 == n { print $2 }' "$d/run.pids" 2>/dev/null; }
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# Pods first, while the kubelet and containerd run, so that their
# containers and network set-up are undone the usual way.
if alive "$(pid_of apiserver)" && alive "$(pid_of kubelet)"; then
	log "deleting pods"
	kubectl_node delete pods --all --all-namespaces --grace-period=1 --wait=true >/dev/null 2>&1 || true
fi
if alive "$(pid_of containerd)"; then
	for t in $(ctr_node tasks ls -q 2>/dev/null); do
		ctr_node tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
	done
	sleep 1
	for c in $(ctr_node containers ls -q 2>/dev/null); do
		ctr_node tasks rm -f "$c" >/dev/null 2>&1 || true
		ctr_node containers rm "$c" >/dev/null 2>&1 || true
	done
fi

# Then the processes, newest first, by the PIDs kube-up.sh recorded.
log "stopping the cluster's processes"
for name in kube-router kubelet scheduler controller-manager apiserver containerd etcd; do
	p=$(pid_of "$name")
	alive "$p" || continue
	kill "$p" 2>/dev/null
	for _ in $(seq 50); do alive "$p" || break; sleep 0.1; done
	alive "$p" && kill -9 "$p" 2>/dev/null
done

# Whatever still runs in the node's network namespace is the cluster's
# (containerd's shims, a container the kill above missed): each such
# process, found by its namespace, by PID.
if [ -e "$kube_netns" ]; then
	ns=$(stat -L -c %i "$kube_netns" 2>/dev/null)
	for _ in 1 2 3; do
		left=()
		for pd in /proc/[0-9]*; do
			[ "$(stat -L -c %i "$pd/ns/net" 2>/dev/null)" = "$ns" ] && left+=("${pd#/proc/}")
		done
		[ ${#left[@]} -eq 0 ] && break
		log "stopping ${#left[@]} leftover process(es) in the node's namespace: ${left[*]}"
		kill -9 "${left[@]}" 2>/dev/null
		sleep 1
	done
	umount "$kube_netns" 2>/dev/null
fi

# The state, but not the logs. Nothing is mounted under it any more: the
# containers' mounts were in the private mount namespace, gone with its
# last process.
if findmnt -rn -o TARGET | grep -q "^$d/"; then
	echo "$0: still mounted under $d (see findmnt); not removing it" >&2
	exit 1
fi
find "$d" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
log "test cluster stopped; logs in $d/logs"
