#!/usr/bin/env bash
# Brings up a real single-node Kubernetes for sbx's tests, built from Go
# module sources: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and the kubelet (Kubernetes v1.37.2, through the wrapper
# modules in scripts/kube/, which keep them out of sbx's own go.mod), on a
# containerd instance of its own, with the bridge CNI plugin and
# kube-router enforcing NetworkPolicy. No registry is needed: the pause and
# busybox images are built here as archives and imported into that
# containerd. docs/kubernetes.md says what it does to stay off the host.
#
#   scripts/kube-up.sh      # prints the kubeconfig; scripts/kube-down.sh stops it
#
# The whole cluster runs in a network namespace of its own (the API server
# answers at https://10.250.0.1:16443 only there):
#
#   nsenter --net=/var/tmp/sbx-kube/netns kubectl --kubeconfig /var/tmp/sbx-kube/admin.kubeconfig get pods -A
#
# Builds are cached under /var/cache/sbx-kube (SBX_KUBE_CACHE), keyed by
# version (scripts/kube-build.sh): the first run builds for about 11
# minutes on 2 idle cores (6.5 GB of caches), later ones have the node Ready
# in about 12 s.
# Needs root. After a failure, run scripts/kube-down.sh: it cleans up
# whatever was started.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
. scripts/kube/kube.sh
[ "$(id -u)" -eq 0 ] || { echo "$0: needs root (network and mount namespaces, a containerd of its own); run it with sudo" >&2; exit 1; }
need_go
need_packages containerd runc iproute2 iptables ipset containernetworking-plugins openssl busybox-static gcc libc6-dev util-linux
if [ -e "$kube_dir/run.pids" ]; then
	echo "$0: a test cluster is already up in $kube_dir (or was not torn down); run scripts/kube-down.sh first" >&2
	exit 1
fi
up_started=$(date +%s)

# The programs, built the first time (scripts/kube-build.sh).
scripts/kube-build.sh
built=$(date +%s)
log "binaries ready in $((built - up_started)) s"

rm -rf "$kube_dir"
mkdir -p "$kube_dir"/{pki,logs,containerd,cni/net.d,kubelet,podlogs,fakesys}
chmod 755 "$kube_dir"
d=$kube_dir
p=$d/pki

# Images: pause (a static build of scripts/kube/pause.c) and busybox (the
# host's), cached under a key made of both.
images=$kube_cache/images/$(cat scripts/kube/pause.c /bin/busybox | sha256sum | cut -c1-12)
if [ ! -e "$images/pause.tar" ] || [ ! -e "$images/busybox.tar" ]; then
	log "building the pause and busybox images"
	mkdir -p "$images"
	w=$(mktemp -d)
	mkdir -p "$w/pause" "$w/busybox/bin" "$w/busybox/"{etc,tmp,proc,sys,dev,www}
	gcc -static -O2 -o "$w/pause/pause" scripts/kube/pause.c
	image_archive "$w/pause" "$kube_pause_image" "$images/pause.tar" '["/pause"]'
	cp /bin/busybox "$w/busybox/bin/busybox"
	for a in $(/bin/busybox --list); do
		[ "$a" = busybox ] || ln -s busybox "$w/busybox/bin/$a"
	done
	echo ok >"$w/busybox/www/index.html"
	image_archive "$w/busybox" "$kube_busybox_image" "$images/busybox.tar" '["/bin/sh"]'
	rm -rf "$w"
fi

# Certificates: a CA, the API server, the kubelet's serving and client
# certificates, the API server's client certificate for the kubelet, the
# administrator (also used by the scheduler and kube-router), the
# controller manager, and the service-account signing key.
log "certificates and kubeconfigs"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=sbx-kube-ca \
	-keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
# cert NAME SUBJECT [SANS]
cert() {
	local name=$1 subj=$2 sans=${3:-}
	local ext="keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth"
	[ -n "$sans" ] && ext="$ext
subjectAltName=$sans"
	openssl req -new -newkey rsa:2048 -nodes -subj "$subj" -keyout "$p/$name.key" -out "$p/$name.csr" 2>/dev/null
	openssl x509 -req -in "$p/$name.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 2 \
		-extfile <(echo "$ext") -out "$p/$name.crt" 2>/dev/null
}
cert apiserver /CN=kube-apiserver "IP:$kube_node_ip,IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
cert kubelet "/CN=$kube_node" "IP:$kube_node_ip,DNS:$kube_node"
cert kubelet-client "/O=system:nodes/CN=system:node:$kube_node"
cert admin "/O=system:masters/CN=sbx-kube-admin"
cert controller-manager /CN=system:kube-controller-manager
openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
# kubeconfig NAME CERT
kubeconfig() {
	cat >"$d/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sbx-kube
  cluster: {server: "https://$kube_node_ip:$kube_api_port", certificate-authority: "$p/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$p/$2.crt", client-key: "$p/$2.key"}
contexts:
- name: sbx-kube
  context: {cluster: sbx-kube, user: $2}
current-context: sbx-kube
EOF
}
kubeconfig admin admin
kubeconfig controller-manager controller-manager
kubeconfig kubelet kubelet-client

# The node's network namespace: a veth pair inside it carries the node's
# address and a default route (the kubelet wants one), and nothing
# connects it to the host.
: >"$d/run.pids"
touch "$kube_netns"
unshare --net="$kube_netns" true
in_node ip link set lo up
in_node ip link add k8sv0 type veth peer name k8sv1
in_node ip addr add "$kube_node_ip/24" dev k8sv0
in_node ip link set k8sv0 up
in_node ip link set k8sv1 up
in_node ip route add default via 10.250.0.254 dev k8sv0 onlink

# start NAME CMD...: runs the program CMD in the background, logging to
# logs/NAME.log, and records its PID for kube-down.sh. (A program, not a
# shell function: the PID would be a subshell's.) nsenter and unshare
# without --fork exec what they run, so the PID stays the program's.
start() {
	local name=$1
	shift
	"$@" >"$d/logs/$name.log" 2>&1 </dev/null &
	echo "$name $!" >>"$d/run.pids"
}

log "etcd, API server, controller manager, scheduler"
start etcd nsenter --net="$kube_netns" "$kube_bin_etcd/etcd" --name node1 --data-dir "$d/etcd" \
	--listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
	--listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
	--initial-cluster node1=http://127.0.0.1:23800 --listen-metrics-urls http://127.0.0.1:23810
start apiserver nsenter --net="$kube_netns" "$kube_bin_k8s/kube-apiserver" \
	--etcd-servers=http://127.0.0.1:23790 \
	--bind-address=0.0.0.0 --secure-port="$kube_api_port" --advertise-address="$kube_node_ip" \
	--tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
	--client-ca-file="$p/ca.crt" \
	--service-account-issuer=https://kubernetes.default.svc \
	--service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
	--service-cluster-ip-range="$kube_service_cidr" \
	--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
	--allow-privileged=true \
	--kubelet-client-certificate="$p/apiserver-kubelet-client.crt" --kubelet-client-key="$p/apiserver-kubelet-client.key" \
	--kubelet-preferred-address-types=InternalIP
# wait_for WHAT SECONDS CMD...: polls CMD once a second.
wait_for() {
	local what=$1 n=$2
	shift 2
	for _ in $(seq "$n"); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 1
	done
	echo "$0: $what did not come up within $n s; see the logs in $d/logs, then run scripts/kube-down.sh" >&2
	exit 1
}
wait_for "the API server" 90 kubectl_node get --raw /readyz
start controller-manager nsenter --net="$kube_netns" "$kube_bin_k8s/kube-controller-manager" \
	--kubeconfig="$d/controller-manager.kubeconfig" \
	--authentication-kubeconfig="$d/controller-manager.kubeconfig" \
	--authorization-kubeconfig="$d/controller-manager.kubeconfig" \
	--service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
	--bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true
start scheduler nsenter --net="$kube_netns" "$kube_bin_k8s/kube-scheduler" \
	--kubeconfig="$d/admin.kubeconfig" \
	--authentication-kubeconfig="$d/admin.kubeconfig" --authorization-kubeconfig="$d/admin.kubeconfig" \
	--bind-address=127.0.0.1 --leader-elect=false

# containerd, with its own root, state and socket. restrict_oom_score_adj:
# hosts that forbid a negative oom_score_adj otherwise fail the pause
# container ("can't get final child's PID").
cat >"$d/containerd/config.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$kube_ctd_sock"
[ttrpc]
  address = "$kube_ctd_sock.ttrpc"
[debug]
  address = "$d/containerd/debug.sock"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$kube_pause_image"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
EOF
cat >"$d/cni/net.d/10-bridge.conflist" <<EOF
{"cniVersion":"0.4.0","name":"sbx-kube","plugins":[
 {"type":"bridge","bridge":"k8sbr0","isGateway":true,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","ranges":[[{"subnet":"$kube_pod_cidr"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"$d/cni/ipam"}}]}
EOF
# The kubelet on a cgroup v1 host: failCgroupV1 false, the cgroupfs
# driver, no per-QoS cgroups.
echo "# the test cluster has no DNS" >"$d/resolv.conf"
cat >"$d/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$p/ca.crt"}
authorization: {mode: AlwaysAllow}
address: $kube_node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: "$p/kubelet.crt"
tlsPrivateKeyFile: "$p/kubelet.key"
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
containerRuntimeEndpoint: "unix://$kube_ctd_sock"
failSwapOn: false
podLogsDir: "$d/podlogs"
clusterDomain: cluster.local
resolvConf: "$d/resolv.conf"
serializeImagePulls: false
evictionHard: {"nodefs.available": "1%", "imagefs.available": "1%", "memory.available": "100Mi"}
imageGCHighThresholdPercent: 100
EOF

# containerd and the kubelet share one private mount namespace, in the
# node's network namespace. There, the host-wide sysctls the kubelet sets
# are covered by files holding the values it wants, and /run, /var/lib and
# /var/log are private tmpfs (pod network namespaces, runc's state, the
# CNI cache, the kubelet's /var/log/containers), so nothing of theirs lands
# on the host.
log "containerd and the kubelet"
covers=""
for s in $kube_kubelet_sysctls; do
	f=${s%=*}
	echo "${s#*=}" >"$d/fakesys/${f//\//.}"
	covers="$covers mount --bind $d/fakesys/${f//\//.} /proc/sys/$f;"
done
start containerd nsenter --net="$kube_netns" unshare -m --propagation slave /bin/sh -c \
	"set -e; $covers mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /var/lib; mount -t tmpfs tmpfs /var/log; exec containerd --config $d/containerd/config.toml"
ctd_pid=$(awk '$1 == "containerd" { print $2 }' "$d/run.pids")
wait_for "containerd" 30 ctr_node version
ctr_node images import --all-platforms "$images/pause.tar" >/dev/null
ctr_node images import --all-platforms "$images/busybox.tar" >/dev/null
# The unshare'd shell exec'd containerd: its PID is containerd's, and
# nsenter joins its mount namespace.
start kubelet nsenter -t "$ctd_pid" -m -n "$kube_bin_k8s/kubelet" --config="$d/kubelet/config.yaml" \
	--kubeconfig="$d/kubelet.kubeconfig" --root-dir="$d/kubelet/root" \
	--hostname-override="$kube_node" --node-ip="$kube_node_ip"
node_ready() { kubectl_node get node "$kube_node" | grep -q ' Ready'; }
wait_for "the node" 120 node_ready
# No controller allocates node CIDRs here; kube-router wants the node's.
kubectl_node patch node "$kube_node" -p "{\"spec\":{\"podCIDR\":\"$kube_pod_cidr\",\"podCIDRs\":[\"$kube_pod_cidr\"]}}" >/dev/null

# kube-router, for NetworkPolicy only (no routing, service proxy or CNI):
# its chains and ipsets are in the node's network namespace.
log "kube-router"
start kube-router nsenter --net="$kube_netns" unshare -m --propagation slave /bin/sh -c \
	"set -e; mount -t tmpfs tmpfs /run; mount -t tmpfs tmpfs /var/lib; exec $kube_bin_router/kube-router --kubeconfig=$d/admin.kubeconfig --hostname-override=$kube_node --run-firewall=true --run-router=false --run-service-proxy=false --enable-cni=false --service-cluster-ip-range=$kube_service_cidr --metrics-port=0 --health-port=20244"
wait_for "kube-router" 60 in_node busybox wget -q -O /dev/null http://127.0.0.1:20244/healthz

up_done=$(date +%s)
log "node Ready: $((up_done - up_started)) s in all, $((up_done - built)) s after the build"
cat >"$d/env" <<EOF
# sourced: the test cluster's kubeconfig and the namespace its API server is reached from
export KUBECONFIG=$d/admin.kubeconfig
export SBX_KUBE_NETNS=$kube_netns
EOF
echo "$d/admin.kubeconfig"
