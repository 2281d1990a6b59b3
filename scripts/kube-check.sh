#!/usr/bin/env bash
# Checks the test cluster end to end: brings it up (scripts/kube-up.sh),
# shows that NetworkPolicy is enforced on it, with busybox pods from the
# locally built image (a web pod and a client pod):
#
#   no policy                               -> the client gets 200
#   deny-all ingress                        -> refused
#   allow from role=client, client labelled -> 200
#   the label removed                       -> refused
#
# then tears it down (scripts/kube-down.sh) and checks that the host's
# iptables rules (without counters), the sysctls the kubelet would set,
# its mounts and the machine's containerd (namespace k8s.io) are as they
# were. Prints the bring-up time and whether the build was cold or warm.
# Exits non-zero on any failure. Needs root.
#
#   scripts/kube-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
. scripts/kube/kube.sh
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root; run it with sudo" >&2; exit 1; }

work=$(mktemp -d)
# However this script ends, the cluster does not outlive it.
cleanup() {
	[ -e "$kube_dir/run.pids" ] && { scripts/kube-down.sh || true; }
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "$0: FAIL: $*" >&2
	exit 1
}

# The machine's containerd, as far as the cluster could have touched it.
machine_containerd() {
	echo "## machine containerd, namespace k8s.io"
	timeout 10 ctr -n k8s.io images ls -q 2>/dev/null | sort
	timeout 10 ctr -n k8s.io containers ls -q 2>/dev/null | sort
}
{ host_state; machine_containerd; } >"$work/before"

cold=warm
for b in "$kube_bin_etcd/etcd" "$kube_bin_k8s"/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl} "$kube_bin_router/kube-router"; do
	[ -x "$b" ] || cold=cold
done
start=$(date +%s)
# kube-up.sh's progress (a cold build takes minutes) shows as it goes.
scripts/kube-up.sh >"$work/up.out" || fail "scripts/kube-up.sh failed (above)"
up_secs=$(($(date +%s) - start))

ns=sbx-kube-check
# A namespace gets its default ServiceAccount from the controller manager;
# pods are refused until then.
kubectl_node create namespace "$ns" >/dev/null || fail "cannot create namespace $ns"
for _ in $(seq 60); do
	kubectl_node -n "$ns" get serviceaccount default >/dev/null 2>&1 && break
	sleep 1
done
cat >"$work/pods.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: $ns, labels: {app: web}}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: $kube_busybox_image
    imagePullPolicy: Never
    command: ["/bin/httpd", "-f", "-p", "8080", "-h", "/www"]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: $ns}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: $kube_busybox_image
    imagePullPolicy: Never
    command: ["/bin/sleep", "3600"]
EOF
cat >"$work/deny.yaml" <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-all-ingress, namespace: $ns}
spec:
  podSelector: {}
  policyTypes: [Ingress]
EOF
cat >"$work/allow.yaml" <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: allow-web-from-clients, namespace: $ns}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {role: client}}}]
    ports: [{port: 8080, protocol: TCP}]
EOF
kubectl_node apply -f "$work/pods.yaml" >/dev/null || fail "cannot create the pods"
kubectl_node -n "$ns" wait --for=condition=Ready pod/web pod/client --timeout=90s >/dev/null ||
	fail "the pods did not become Ready: $(kubectl_node -n "$ns" describe pods 2>&1 | tail -20)"
web_ip=$(kubectl_node -n "$ns" get pod web -o jsonpath='{.status.podIP}')

# get: the client pod fetches the web pod's page; prints ok, wget's error,
# or why kubectl exec failed. (busybox 1.35's wget -T crashes: timeout
# bounds it instead.)
get() {
	local out rc=0
	out=$(kubectl_node -n "$ns" exec client -- timeout 5 wget -q -O - "http://$web_ip:8080/" 2>&1) || rc=$?
	out=$(printf '%s\n' "$out" | tr -d '\r' | grep -v '^command terminated' | tail -1 || true)
	case $rc:$out in
	0:ok) echo ok ;;
	*:wget:*) echo "$out" ;;
	124:* | 143:*) echo "wget: timed out" ;;
	*) echo "kubectl exec failed ($rc): $out" ;;
	esac
}
# expect WHAT ok|refused: polls for up to 30 s (kube-router applies a
# change within seconds), then fails.
expect() {
	local what=$1 want=$2 got
	for _ in $(seq 30); do
		got=$(get)
		if [ "$want" = ok ] && [ "$got" = ok ]; then
			log "$what: client gets 200"
			return 0
		fi
		# wget's own failure, not kubectl's: the connection failed.
		if [ "$want" = refused ] && [[ $got == wget:* ]]; then
			log "$what: refused ($got)"
			return 0
		fi
		sleep 1
	done
	fail "$what: got \"$got\", want $want"
}
expect "no policy" ok
kubectl_node apply -f "$work/deny.yaml" >/dev/null || fail "cannot create the deny-all policy"
expect "deny-all ingress" refused
kubectl_node apply -f "$work/allow.yaml" >/dev/null || fail "cannot create the allow policy"
kubectl_node -n "$ns" label pod client role=client >/dev/null || fail "cannot label the client"
expect "allow from role=client, client labelled" ok
kubectl_node -n "$ns" label pod client role- >/dev/null || fail "cannot remove the client's label"
expect "label removed" refused

scripts/kube-down.sh || fail "scripts/kube-down.sh failed"
{ host_state; machine_containerd; } >"$work/after"

# The machine is shared: other sandboxes may add or remove their own
# rules and mounts meanwhile. A difference that names the cluster's
# chains, addresses, devices or directories is a failure; any other is
# shown, and a sysctl that differs is always a failure.
if cmp -s "$work/before" "$work/after"; then
	log "host unchanged: iptables rules, sysctls, mounts, the machine's containerd"
else
	diff "$work/before" "$work/after" | grep '^[<>]' >"$work/diff" || true
	ours='KUBE-|kube-router|10\.244\.|10\.250\.|10\.96\.|k8sbr|k8sv|sbx-kube|/run/netns/cni-|kubelet|/proc/sys|localhost/sbx-kube'
	sysctl_changed=$(sed -n '/^## sysctls/,/^## mounts/p' "$work/before" | cmp -s - <(sed -n '/^## sysctls/,/^## mounts/p' "$work/after") || echo yes)
	if grep -qE "$ours" "$work/diff" || [ -n "$sysctl_changed" ]; then
		cat "$work/diff" >&2
		echo "$0: FAIL: the host changed (above: < before, > after)" >&2
		exit 1
	fi
	log "host unchanged as far as the cluster goes; other changes on the machine meanwhile, none with the cluster's names:"
	sed 's/^/    /' "$work/diff" >&2
fi
log "bring-up: $up_secs s ($cold build)"
echo "PASS: NetworkPolicy enforced on the test cluster; bring-up $up_secs s ($cold)"
