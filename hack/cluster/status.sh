#!/usr/bin/env bash
# Shows which processes of the local cluster run and, when the API server answers, its nodes
# and pods.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for name in containerd registry registry-tls etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
	if pid=$(pid_of "$name"); then
		printf '%-24s running (pid %s)\n' "$name" "$pid"
	else
		printf '%-24s stopped\n' "$name"
	fi
done
if running kube-apiserver && kubectl get --raw /readyz >/dev/null 2>&1; then
	echo
	kubectl get nodes -o wide
	echo
	kubectl get pods -A -o wide
	echo
	echo "export KUBECONFIG=$CLUSTER_KUBECONFIG"
fi
