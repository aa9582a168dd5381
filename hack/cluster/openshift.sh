#!/usr/bin/env bash
# Gives the local cluster what an operator meets on OpenShift, as far as this machine can: the
# API groups it may look for, the restricted-v2 security context constraint as admission
# policies on every namespace with OpenShift's ID range annotations, and the namespace
# OperatorHub installs into for all namespaces (openshift-operators). docs/development.md says
# what is emulated and what is not.
#
#   openshift.sh up     adds it (idempotent)
#   openshift.sh down   removes it; namespaces keep their ranges and label, which nothing then reads
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/openshift

# The namespaces of the platform itself keep running as they do: on OpenShift the control
# plane's, OLM's and the storage provisioner's pods run under privileged constraints.
PLATFORM_NAMESPACES='^(kube-.*|default|olm|operators|local-path-storage)$'
LABEL=etcd.database.dev/openshift-emulation=restricted-v2

up() {
	kubectl apply -f "$HERE/apis.yaml" >/dev/null
	kubectl wait --for condition=Established --timeout=60s \
		crd/securitycontextconstraints.security.openshift.io crd/clusterversions.config.openshift.io crd/etcds.operator.openshift.io >/dev/null
	kubectl apply -f "$HERE/objects.yaml" >/dev/null
	kubectl patch clusterversion version --subresource=status --type=merge \
		-p '{"status":{"desired":{"version":"4.17.0"},"history":[{"state":"Completed","version":"4.17.0"}]}}' >/dev/null
	kubectl apply -f "$HERE/restricted-v2.yaml" >/dev/null
	# Namespaces made before: given their ranges as OpenShift gives every namespace. Their
	# running pods are not judged again (admission judges a pod when it is created).
	local ns
	for ns in $(kubectl get namespaces -o name | sed 's|^namespace/||' | grep -Ev "$PLATFORM_NAMESPACES"); do
		kubectl annotate --overwrite=false namespace "$ns" openshift.io/sa.scc.uid-range=1000650000/10000 \
			openshift.io/sa.scc.supplemental-groups=1000650000/10000 openshift.io/sa.scc.mcs=s0:c26,c5 >/dev/null 2>&1 || true
		kubectl label --overwrite namespace "$ns" "$LABEL" >/dev/null
	done
	# The policies take effect once the API server has loaded them: a pod that they refuse tells.
	local probe deadline=$((SECONDS + 60))
	probe='{"apiVersion":"v1","kind":"Pod","metadata":{"name":"restricted-v2-probe"},"spec":{"securityContext":{"runAsUser":1},"containers":[{"name":"c","image":"probe"}]}}'
	until ! kubectl -n openshift-operators create --dry-run=server -f - <<<"$probe" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "restricted-v2's policies still admit a pod with runAsUser 1 after 60 s"
		sleep 1
	done
	log "OpenShift emulation up: security.openshift.io, config.openshift.io (ClusterVersion 4.17.0), etcds.operator.openshift.io; restricted-v2 on namespaces labelled $LABEL; openshift-operators (AllNamespaces)"
}

down() {
	kubectl delete --ignore-not-found -f "$HERE/restricted-v2.yaml" >/dev/null
	kubectl delete --ignore-not-found -f "$HERE/apis.yaml" >/dev/null
	log "OpenShift emulation down"
}

case ${1:-} in
up) up ;;
down) down ;;
*) die "usage: $0 up|down" ;;
esac
