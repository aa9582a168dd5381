#!/usr/bin/env bash
# Stops the local cluster started by up.sh and removes what it left on the machine: its
# processes (by recorded PID, never by name), pod containers, mounts, iptables rules and chains,
# the bridge and its routes. Data under $CLUSTER_DIR (etcd, images, volumes, certificates) is kept for
# the next cluster-up unless PURGE=1. Safe on a half-started or already stopped cluster.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ -z ${CLUSTER_CRICTL:-} ]]; then
	crictls=("$CLUSTER_BIN"/crictl/*/crictl)
	CLUSTER_CRICTL=${crictls[-1]}
fi
: "${PURGE:=}"

# stop NAME...: SIGTERM to each recorded process that is still ours, then SIGKILL to those still
# running after 10 s. All at once: each takes a second or two to shut down gracefully.
stop() {
	local name pid pids=() names=()
	for name in "$@"; do
		if pid=$(pid_of "$name"); then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
			names+=("$name")
		fi
		rm -f "$CLUSTER_PIDS/$name.pid"
	done
	local deadline=$((SECONDS + 10)) i
	for i in "${!pids[@]}"; do
		while [[ -d /proc/${pids[i]} ]] && ((SECONDS < deadline)); do sleep 0.1; done
		if [[ -d /proc/${pids[i]} ]]; then
			log "${names[i]} (pid ${pids[i]}) ignored SIGTERM; killing it"
			kill -KILL "${pids[i]}" 2>/dev/null || true
		fi
		log "stopped ${names[i]}"
	done
}

# Pod containers outlive kubelet and containerd (each has its own shim), so they are removed
# through the CRI while containerd still runs: that also tears down their network namespaces,
# veths and IP allocations through CNI.
#   remove_pods [CONTAINERD CRICTL_CONFIG]: the first node's, or the named containerd's.
remove_pods() {
	local containerd=${1:-containerd} config=${2:-$CLUSTER_CRICTL_CONFIG}
	running "$containerd" && [[ -x $CLUSTER_CRICTL ]] || return 0
	"$CLUSTER_CRICTL" --config "$config" --timeout 60s rmp --all --force >/dev/null ||
		log "crictl rmp on $containerd failed; leftover containers are killed below"
}

# After a crash of containerd its shims and containers may still run. containerd recorded them
# in its task state under $CLUSTER_RUN_DIR: each container's init PID, and the socket of the shim
# serving it, which is how the shim is found (containerd 1.6 puts shim sockets in
# /run/containerd/s whatever its state dir, so those sockets are removed here too).
#   kill_leftover_tasks [STATE]: the first node's containerd's, or the one whose state is STATE.
kill_leftover_tasks() {
	local tasks=${1:-$CLUSTER_RUN_DIR/containerd}/io.containerd.runtime.v2.task task pid socket
	[[ -d $tasks ]] || return 0
	for task in "$tasks"/*/*/; do
		[[ -f $task/init.pid ]] || continue
		pid=$(<"$task/init.pid")
		# A container of ours lives in a cgroup under kubepods.
		if grep -q kubepods "/proc/$pid/cgroup" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null && log "killed leftover container process $pid"
		fi
	done
	for task in "$tasks"/*/*/; do
		# The results CNI cached for a sandbox, removed by CNI DEL when the sandbox is removed.
		rm -f /var/lib/cni/results/*-"$(basename "$task")"-*
		[[ -f $task/address ]] || continue
		socket=$(<"$task/address")
		socket=${socket#unix://}
		[[ -S $socket ]] || continue
		# Nobody listens on the socket of a shim that was killed with everything else: no PID.
		pid=$(ss -xlpH src "$socket" | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2) || pid=
		if [[ -n $pid && $(readlink "/proc/$pid/exe" 2>/dev/null) == */containerd-shim-runc-v2 ]]; then
			kill -KILL "$pid" 2>/dev/null && log "killed leftover shim $pid"
		fi
		rm -f "$socket"
	done
}

our_mounts() {
	findmnt -rn -o TARGET | awk -v a="$CLUSTER_DIR" -v b="$CLUSTER_RUN_DIR" \
		'$0 == a || $0 == b || index($0, a "/") == 1 || index($0, b "/") == 1'
}

# Every mount below our directories: kubelet's volumes and its root bind mount, container
# root filesystems, sandbox /dev/shm and network namespaces. Deepest first; repeated because
# mounts can be stacked on the same path. Fails if any is left.
unmount_all() {
	local mnt
	for _ in 1 2 3; do
		[[ -n $(our_mounts) ]] || return 0
		# findmnt escapes spaces as \x20; none of our paths has any.
		for mnt in $(our_mounts | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-); do
			umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
		done
	done
	[[ -z $(our_mounts) ]]
}

# kube-proxy, kubelet and the CNI plugins create KUBE-* and CNI-* chains; kube-proxy --cleanup
# removes most of its own, and what is left (kubelet's canaries and firewall, CNI's) goes here.
clean_iptables() {
	local forward=(FORWARD -i "$CLUSTER_BRIDGE" ! -o "$CLUSTER_BRIDGE" -m comment --comment "$CLUSTER_FORWARD_COMMENT" -j REJECT)
	while iptables -D "${forward[@]}" 2>/dev/null; do :; done
	if [[ -x $CLUSTER_K8S_BIN/kube-proxy ]]; then
		local out=/dev/null
		[[ -d $CLUSTER_LOGS ]] && out=$CLUSTER_LOGS/kube-proxy-cleanup.log
		"$CLUSTER_K8S_BIN/kube-proxy" --cleanup >>"$out" 2>&1 || true
	fi
	local cmd table rules rule chains chain
	for cmd in iptables ip6tables; do
		command -v "$cmd" >/dev/null || continue
		for table in filter nat mangle; do
			rules=$("$cmd" -t "$table" -S 2>/dev/null) || continue
			# Rules of built-in chains that jump to our chains go first, then our chains.
			while IFS= read -r rule; do
				[[ $rule =~ ^-A\ [A-Z]+\ .*-j\ (KUBE|CNI)- ]] || continue
				eval "$cmd -t $table -D ${rule#-A }" 2>/dev/null || true
			done <<<"$rules"
			chains=$(awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ { print $2 }' <<<"$rules")
			for chain in $chains; do "$cmd" -t "$table" -F "$chain" 2>/dev/null || true; done
			for chain in $chains; do "$cmd" -t "$table" -X "$chain" 2>/dev/null || true; done
		done
	done
}

clean_network() {
	clean_iptables
	if ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1; then
		ip link delete "$CLUSTER_BRIDGE"
	fi
	ip route del unreachable "$CLUSTER_POD_CIDR" 2>/dev/null || true
	if [[ -f $CLUSTER_RUN_DIR/ip_forward.orig ]]; then
		cat "$CLUSTER_RUN_DIR/ip_forward.orig" >/proc/sys/net/ipv4/ip_forward
	fi
}

# Paths outside our directories that kubelet, containerd and CNI use whatever they are told:
# what is ours goes, and the directories go if nothing else is left in them.
clean_fixed_paths() {
	find /var/log/containers -maxdepth 1 -type l -lname "$CLUSTER_DIR/*" -delete 2>/dev/null || true
	local socket=/var/lib/kubelet/device-plugins/kubelet.sock
	if [[ -S $socket && -z $(ss -xlH src "$socket") ]]; then
		rm -f "$socket"
	fi
	rmdir /var/log/containers /var/lib/kubelet/device-plugins /var/lib/kubelet /run/containerd/s /run/containerd \
		/var/lib/cni/results /var/lib/cni 2>/dev/null || true
}

# kubelet makes a cgroup tree for pods under every controller; empty once the pods are gone.
# The second node's kubelet makes its own under its root (second-node.sh).
remove_pod_cgroups() {
	local root
	for root in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/"$CLUSTER_NODE2_CGROUP"; do
		[[ -d $root ]] && find "$root" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	return 0
}

main() {
	((EUID == 0)) || die "must run as root (sudo make cluster-down)"
	local started=$SECONDS
	# Nothing may create pods while they are removed, so kubelet and the controllers go first.
	# The second node's too (second-node.sh), resumed first in case a test left it stopped.
	local pid
	if pid=$(pid_of node2-kubelet); then kill -CONT "$pid" 2>/dev/null || true; fi
	stop kubelet node2-kubelet kube-scheduler kube-controller-manager kube-proxy
	remove_pods
	remove_pods node2-containerd "$CLUSTER_NODE2_RUN_DIR/crictl.yaml"
	stop containerd node2-containerd
	kill_leftover_tasks
	kill_leftover_tasks "$CLUSTER_NODE2_RUN_DIR/containerd"
	stop kube-apiserver registry registry-tls
	stop etcd
	local unmounted=true
	unmount_all || unmounted=false
	clean_network
	remove_pod_cgroups
	clean_fixed_paths
	# Deleting a directory with something still mounted below it would delete into that mount.
	if ! $unmounted; then
		our_mounts >&2
		die "the mounts above are left; $CLUSTER_RUN_DIR and $CLUSTER_DIR were not removed"
	fi
	[[ -f $CLUSTER_RUN_DIR/$CLUSTER_MARKER ]] && rm -rf "$CLUSTER_RUN_DIR"
	if [[ $PURGE == 1 && -f $CLUSTER_DIR/$CLUSTER_MARKER ]]; then
		rm -rf "$CLUSTER_DIR"
		log "purged $CLUSTER_DIR"
	fi
	log "cluster down in $((SECONDS - started))s"
}

# Sourced (by test/clusterscripts), it only defines the functions above.
[[ ${BASH_SOURCE[0]} != "$0" ]] || main "$@"
