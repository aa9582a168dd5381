# shellcheck shell=bash disable=SC2034 # the settings are used by the scripts that source this
# Shared settings and helpers of the local test cluster scripts. Sourced, never run.
#
# hack/cluster.mk passes every CLUSTER_* setting; the defaults below match it so that down.sh and
# status.sh also work when called directly (for instance after the Makefile changed).

set -euo pipefail

CLUSTER_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${CLUSTER_BIN:=$CLUSTER_REPO/bin}"
: "${CLUSTER_K8S_BIN:=$CLUSTER_BIN/k8s}"
# Data that survives cluster-down unless PURGE=1: etcd, images, registry, volumes, certificates.
: "${CLUSTER_DIR:=/var/lib/etcd-operator-cluster}"
# Runtime state that cluster-down always removes: PID files, sockets, containerd's task state.
: "${CLUSTER_RUN_DIR:=/run/etcd-operator-cluster}"
: "${CLUSTER_REGISTRY:=127.0.0.1:5000}"
# The same registry (same storage) over HTTPS, for tools that pull over HTTPS only (operator-sdk
# run bundle). Its certificate is signed by the cluster's CA, $CLUSTER_PKI/ca.crt.
: "${CLUSTER_REGISTRY_TLS:=127.0.0.1:5443}"
# The public registry the local one mirrors: the release's images are named in it (the Makefile's
# REGISTRY), and every node pulls those names from the local registry instead, as a disconnected
# cluster pulls from its mirror. Nothing is ever pulled from the public registry itself.
: "${CLUSTER_MIRRORED_REGISTRY:=ghcr.io}"
: "${CLUSTER_NODE_NAME:=local-node}"
# The second node, only up while a test needs it (second-node.sh): its name, runtime state and
# the cgroup root of its pods.
: "${CLUSTER_NODE2_NAME:=local-node-2}"
CLUSTER_NODE2_RUN_DIR=$CLUSTER_RUN_DIR/node2
CLUSTER_NODE2_CGROUP=etcd-operator-node2

# Private ranges, the usual kubeadm/kind defaults. The node gets the gateway address of its pod
# /24 on the bridge: the API server and kubelet listen there, reachable from pods and the host
# alike, and nothing of the cluster listens on the machine's real interfaces.
CLUSTER_POD_CIDR=10.244.0.0/16
CLUSTER_NODE_POD_CIDR=10.244.0.0/24
CLUSTER_NODE_IP=10.244.0.1
CLUSTER_SERVICE_CIDR=10.96.0.0/12
CLUSTER_API_SERVICE_IP=10.96.0.1
CLUSTER_DNS_IP=10.96.0.10
CLUSTER_BRIDGE=cni0
CLUSTER_APISERVER_PORT=6443
# Not etcd's default ports: tests of the project run their own etcd on 2379.
CLUSTER_ETCD_CLIENT_PORT=12379
CLUSTER_ETCD_PEER_PORT=12380
CLUSTER_REGISTRY_PORT=${CLUSTER_REGISTRY##*:}
CLUSTER_REGISTRY_TLS_PORT=${CLUSTER_REGISTRY_TLS##*:}

CLUSTER_KUBECONFIG=$CLUSTER_DIR/admin.kubeconfig
CLUSTER_PKI=$CLUSTER_DIR/pki
CLUSTER_LOGS=$CLUSTER_DIR/logs
CLUSTER_CONTAINERD_SOCK=$CLUSTER_RUN_DIR/containerd.sock
# For crictl: crictl --config $CLUSTER_CRICTL_CONFIG ps
CLUSTER_CRICTL_CONFIG=$CLUSTER_RUN_DIR/crictl.yaml
CLUSTER_PIDS=$CLUSTER_RUN_DIR/pids
# Marks $CLUSTER_DIR and $CLUSTER_RUN_DIR as made by up.sh: down.sh deletes only marked directories.
CLUSTER_MARKER=.etcd-operator-cluster
# Marks the FORWARD rule that keeps pod traffic on this machine, so down.sh finds exactly it.
CLUSTER_FORWARD_COMMENT="etcd-operator-cluster: pod traffic stays on this machine"

log() { printf '%s cluster: %s\n' "$(date +%T)" "$*" >&2; }
die() {
	printf 'cluster: error: %s\n' "$*" >&2
	exit 1
}

kubectl() { "$CLUSTER_K8S_BIN/kubectl" --kubeconfig "$CLUSTER_KUBECONFIG" "$@"; }
ctr() { command ctr --address "$CLUSTER_CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# A PID file holds "PID EXECUTABLE". A process counts as ours only while that PID still runs that
# executable, so a recycled PID is never mistaken for a component, nor killed.
pid_of() {
	local file=$CLUSTER_PIDS/$1.pid pid exe actual
	[[ -f $file ]] || return 1
	read -r pid exe <"$file" || return 1
	actual=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	# A binary rebuilt while its process runs shows as "PATH (deleted)".
	[[ ${actual% (deleted)} == "$exe" ]] || return 1
	echo "$pid"
}

running() { pid_of "$1" >/dev/null; }
