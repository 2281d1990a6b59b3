# Shared by scripts/kube-up.sh, kube-down.sh and kube-check.sh: sourced,
# not run. The test cluster is one node, in a network namespace of its
# own, with everything it writes under two directories:
#
#   SBX_KUBE_CACHE (/var/cache/sbx-kube): Go's build and module caches and
#     the built binaries, one directory per version, kept between runs.
#   SBX_KUBE_DIR (/var/tmp/sbx-kube): the running cluster: certificates,
#     kubeconfigs, etcd's data, the private containerd, logs, PIDs.
#     kube-up.sh starts it afresh; kube-down.sh leaves only the logs.
#
# SBX_KUBE_DIR must not be under /run or /var/lib: kube-router, containerd
# and the kubelet see a private tmpfs there.

# Kubernetes at the release of the client-go sbx is built with (go.mod).
# Its kubelet still runs on a cgroup v1 host when told to: it refuses one
# only while its failCgroupV1 setting is true, the default since 1.35
# (validateKubeletOSConfiguration, pkg/kubelet/apis/config/validation/
# validation_linux.go); kube-up.sh sets it false. etcd: 1.37 wants 3.5.24
# or newer.
KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.6.6
KUBE_ROUTER_VERSION=v2.1.0

kube_cache=${SBX_KUBE_CACHE:-/var/cache/sbx-kube}
kube_dir=${SBX_KUBE_DIR:-/var/tmp/sbx-kube}
kube_bin_k8s=$kube_cache/bin/k8s-$KUBE_VERSION
kube_bin_etcd=$kube_cache/bin/etcd-$ETCD_VERSION
kube_bin_router=$kube_cache/bin/kube-router-$KUBE_ROUTER_VERSION

# The node's network namespace, held by a bind mount on this file (not
# `ip netns add`, whose /run/netns would be the host's to clean up).
kube_netns=$kube_dir/netns
kube_node=node1
kube_node_ip=10.250.0.1
kube_pod_cidr=10.244.0.0/24
kube_service_cidr=10.96.0.0/16
kube_api_port=16443
kube_ctd_sock=$kube_dir/containerd/containerd.sock
kube_pause_image=localhost/sbx-kube/pause:1
kube_busybox_image=localhost/sbx-kube/busybox:1

# The host-wide sysctls the kubelet would set (vm.overcommit_memory=1 and
# so on). It sees files holding those values bind-mounted over them in
# its private mount namespace, so the host's stay as they are.
kube_kubelet_sysctls="vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000"

# in_node CMD...: CMD in the node's network namespace. nsenter, not
# `ip netns exec`: the latter remounts /sys, which hides the cgroup
# mounts that runc needs.
in_node() { nsenter --net="$kube_netns" "$@"; }

# kubectl_node ARGS...: the cluster's own kubectl, as the administrator,
# from inside the node's network namespace (the API server listens only
# there); at most two minutes.
kubectl_node() { in_node timeout 120 "$kube_bin_k8s/kubectl" --kubeconfig="$kube_dir/admin.kubeconfig" "$@"; }

# ctr_node ARGS...: ctr against the cluster's own containerd; at most 30 s.
ctr_node() { timeout 30 ctr -a "$kube_ctd_sock" -n k8s.io "$@"; }

# image_archive ROOTFS REF OUT ENTRYPOINT_JSON writes a single-layer image
# of the directory ROOTFS as a docker-archive tar that `ctr images import`
# loads: no registry and no image builder are needed.
image_archive() {
	local root=$1 ref=$2 out=$3 entrypoint=$4 w diffid config
	w=$(mktemp -d)
	mkdir "$w/layer"
	tar -C "$root" --owner=0 --group=0 --numeric-owner -cf "$w/layer/layer.tar" .
	diffid=sha256:$(sha256sum "$w/layer/layer.tar" | cut -d' ' -f1)
	printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s,"Env":["PATH=/bin"]},"rootfs":{"type":"layers","diff_ids":["%s"]},"history":[{"created_by":"sbx scripts/kube"}]}' \
		"$entrypoint" "$diffid" >"$w/config.json"
	config=$(sha256sum "$w/config.json" | cut -d' ' -f1).json
	mv "$w/config.json" "$w/$config"
	printf '[{"Config":"%s","RepoTags":["%s"],"Layers":["layer/layer.tar"]}]' "$config" "$ref" >"$w/manifest.json"
	tar -C "$w" -cf "$out" manifest.json "$config" layer
	rm -rf "$w"
}

# host_state prints what the cluster must leave as it found it: the
# host's iptables rules without counters, the sysctls the kubelet and
# kube-router would set, and the mounts. kube-check.sh compares it
# before and after.
host_state() {
	local s
	echo "## iptables"
	iptables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//'
	echo "## ip6tables"
	ip6tables-save 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//'
	echo "## sysctls"
	for s in $kube_kubelet_sysctls net/bridge/bridge-nf-call-iptables net/ipv4/ip_forward; do
		s=${s%=*}
		echo "$s=$(cat "/proc/sys/$s" 2>/dev/null)"
	done
	echo "## mounts"
	findmnt -rn -o TARGET,FSTYPE,SOURCE | sort
}
