#!/usr/bin/env bash
# A second node for the local cluster, on the same machine: a containerd and a kubelet of its
# own (node $CLUSTER_NODE2_NAME), sharing the first node's bridge, pod IP range, API server and
# kube-proxy. Only the split-brain test of a node that is lost while its etcd runs, then comes back
# (test/e2e/partition_test.go), needs it: the second node's kubelet and members are stopped
# while the first node's kubelet restarts the survivor. The ordinary e2e suite never runs with it.
#
#   second-node.sh up     start it (idempotent); needs the cluster up
#   second-node.sh down   stop it, remove its pods, containers, mounts, cgroups and Node object
#
# Run through make second-node-up / second-node-down (hack/cluster.mk); cluster-down stops it too.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/up.sh"
source "$(dirname "${BASH_SOURCE[0]}")/down.sh"

NODE2_DIR=$CLUSTER_DIR/node2
NODE2_RUN_DIR=$CLUSTER_NODE2_RUN_DIR
NODE2_CONTAINERD_SOCK=$NODE2_RUN_DIR/containerd.sock
NODE2_CRICTL_CONFIG=$NODE2_RUN_DIR/crictl.yaml
# Its pods' cgroups: a kubelet kills whatever runs in its cgroup tree that it did not start, so
# the two kubelets' trees must not overlap.
NODE2_CGROUP=$CLUSTER_NODE2_CGROUP
# Ports of its kubelet, beside the first's 10250 and 10248.
NODE2_KUBELET_PORT=10350
NODE2_KUBELET_HEALTHZ_PORT=10358

# Every cgroup v1 hierarchy gets the second node's root; cpuset's must be given CPUs and memory
# nodes before anything can join it.
make_cgroup_root() {
	local hierarchy
	for hierarchy in /sys/fs/cgroup/*/; do
		[[ -f $hierarchy/cgroup.procs && ${hierarchy%/} != */unified ]] || continue
		mkdir -p "$hierarchy$NODE2_CGROUP"
	done
	if [[ -d /sys/fs/cgroup/cpuset/$NODE2_CGROUP ]]; then
		cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$NODE2_CGROUP/cpuset.cpus"
		cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$NODE2_CGROUP/cpuset.mems"
	fi
}

remove_cgroup_root() {
	local root
	for root in /sys/fs/cgroup/*/"$NODE2_CGROUP"; do
		[[ -d $root ]] && find "$root" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	return 0
}

node2_up() {
	((EUID == 0)) || die "must run as root (sudo make second-node-up)"
	running kube-apiserver && running kubelet || die "the cluster is not up: run make cluster-up first"
	mkdir -p "$NODE2_DIR" "$NODE2_RUN_DIR"
	cert kubelet-node2 "/O=system:nodes/CN=system:node:$CLUSTER_NODE2_NAME" "$CLIENT_CERT_EXTENSIONS" ca
	kubeconfig kubelet-node2 "system:node:$CLUSTER_NODE2_NAME"
	containerd_config "$NODE2_DIR/containerd" "$NODE2_RUN_DIR/containerd" "$NODE2_CONTAINERD_SOCK" | put "$CONF/node2-containerd.toml"
	printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "$NODE2_CONTAINERD_SOCK" "$NODE2_CONTAINERD_SOCK" | put "$NODE2_CRICTL_CONFIG"
	kubelet_config "$NODE2_CONTAINERD_SOCK" "$NODE2_KUBELET_PORT" "$NODE2_KUBELET_HEALTHZ_PORT" "$NODE2_DIR/pod-logs" "/$NODE2_CGROUP" |
		put "$CONF/node2-kubelet.yaml"
	make_cgroup_root

	# Its images come from the local registry, as a real node's would.
	start node2-containerd containerd --config "$CONF/node2-containerd.toml"
	wait_up 30 node2-containerd command ctr --address "$NODE2_CONTAINERD_SOCK" version
	start node2-kubelet "$CLUSTER_K8S_BIN/kubelet" \
		--config="$CONF/node2-kubelet.yaml" --kubeconfig="$CONF/kubelet-node2.kubeconfig" \
		--root-dir="$NODE2_DIR/kubelet" --cert-dir="$NODE2_DIR/kubelet/pki" \
		--hostname-override="$CLUSTER_NODE2_NAME" --node-ip="$CLUSTER_NODE_IP"
	wait_up 60 node2-kubelet curl -sf "http://127.0.0.1:$NODE2_KUBELET_HEALTHZ_PORT/healthz"
	wait_up 60 node2-kubelet kubectl wait --for=condition=Ready "node/$CLUSTER_NODE2_NAME" --timeout=1s
	log "node $CLUSTER_NODE2_NAME Ready"
}

# node2_down stops the second node and removes everything it left. Its Node object goes too,
# so that nothing is scheduled to a node that no longer runs.
node2_down() {
	((EUID == 0)) || die "must run as root (sudo make second-node-down)"
	# A test may have left the kubelet stopped (SIGSTOP): it cannot end before it runs again.
	local pid
	if pid=$(pid_of node2-kubelet); then kill -CONT "$pid" 2>/dev/null || true; fi
	stop node2-kubelet
	if running kube-apiserver; then
		kubectl delete node "$CLUSTER_NODE2_NAME" --ignore-not-found --wait=false >/dev/null || true
	fi
	remove_pods node2-containerd "$NODE2_CRICTL_CONFIG"
	stop node2-containerd
	kill_leftover_tasks "$NODE2_RUN_DIR/containerd"
	local mnt
	for mnt in $(findmnt -rn -o TARGET | awk -v a="$NODE2_DIR" -v b="$NODE2_RUN_DIR" 'index($0, a "/") == 1 || index($0, b "/") == 1' |
		awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-); do
		umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	done
	remove_cgroup_root
	rm -rf "$NODE2_RUN_DIR" "$NODE2_DIR"
	log "node $CLUSTER_NODE2_NAME down"
}

case ${1:-} in
up) node2_up ;;
down) node2_down ;;
*) die "usage: $0 up|down" ;;
esac
