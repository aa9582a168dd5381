#!/usr/bin/env bash
# Brings up the local single-node Kubernetes cluster: containerd, a local image registry, the
# control plane (etcd, API server, controller manager, scheduler), kubelet and kube-proxy as host
# processes, then CoreDNS and local-path-provisioner as pods. Run through `make cluster-up`,
# which builds the binaries and images first.
#
# Idempotent: components already running are left alone, missing ones are started, so it also
# completes a half-started cluster. Every process it starts is recorded in $CLUSTER_PIDS for
# down.sh, which stops exactly those.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${CLUSTER_PAUSE_IMAGE:?set by hack/cluster.mk: run make cluster-up}"
: "${CLUSTER_COREDNS_IMAGE:?set by hack/cluster.mk: run make cluster-up}"
: "${CLUSTER_LOCAL_PATH_IMAGE:?set by hack/cluster.mk: run make cluster-up}"
: "${CLUSTER_BUSYBOX_IMAGE:?set by hack/cluster.mk: run make cluster-up}"
: "${CLUSTER_ETCD_BIN:?set by hack/cluster.mk: run make cluster-up}"
: "${CLUSTER_CRICTL:?set by hack/cluster.mk: run make cluster-up}"
: "${CLUSTER_IMAGE_TARS:?set by hack/cluster.mk: run make cluster-up}"

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONF=$CLUSTER_DIR/config
# Images, etcd data, volumes and logs of a full e2e run take a few GiB.
MIN_FREE_GIB=5

# Ports each component listens on, to tell "already ours" from "taken by someone else".
declare -A PORTS=(
	[registry]=$CLUSTER_REGISTRY_PORT
	[registry-tls]=$CLUSTER_REGISTRY_TLS_PORT
	[etcd]="$CLUSTER_ETCD_CLIENT_PORT $CLUSTER_ETCD_PEER_PORT"
	[kube-apiserver]=$CLUSTER_APISERVER_PORT
	[kube-controller-manager]=10257
	[kube-scheduler]=10259
	[kubelet]="10250 10248"
	[kube-proxy]="10249 10256"
)

preflight() {
	local cmd
	for cmd in containerd containerd-shim-runc-v2 runc ctr iptables ip6tables docker-registry ip openssl envsubst ss curl findmnt; do
		command -v "$cmd" >/dev/null || die "$cmd not found: run make cluster-tools (installs the Debian packages)"
	done
	[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
		die "CNI plugins missing in /usr/lib/cni: run make cluster-tools"
	for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
		[[ -x $CLUSTER_K8S_BIN/$cmd ]] || die "$CLUSTER_K8S_BIN/$cmd missing: run make cluster-tools"
	done
	[[ -x $CLUSTER_ETCD_BIN ]] || die "$CLUSTER_ETCD_BIN missing: run make cluster-tools"
	[[ -x $CLUSTER_CRICTL ]] || die "$CLUSTER_CRICTL missing: run make cluster-tools"
	local tar
	for tar in $CLUSTER_IMAGE_TARS; do
		[[ -f $tar ]] || die "image $tar missing: run make cluster-up (it builds the images)"
	done
	[[ -d /proc/sys/net/bridge ]] ||
		die "bridge netfilter is not available (/proc/sys/net/bridge missing): load it with 'modprobe br_netfilter'"
	[[ -d /sys/fs/cgroup/memory || -f /sys/fs/cgroup/cgroup.controllers ]] || die "no memory cgroup controller mounted under /sys/fs/cgroup"

	local free_kib
	free_kib=$(df --output=avail -k "$CLUSTER_DIR" | tail -n 1)
	((free_kib >= MIN_FREE_GIB * 1024 * 1024)) ||
		die "only $((free_kib / 1024 / 1024)) GiB free on $(df --output=target "$CLUSTER_DIR" | tail -n 1) ($CLUSTER_DIR); the cluster needs at least $MIN_FREE_GIB GiB"

	local name port
	for name in "${!PORTS[@]}"; do
		running "$name" && continue
		for port in ${PORTS[$name]}; do
			if [[ -n $(ss -Hltn "sport = :$port") ]]; then
				die "port $port, needed by $name, is in use: $(ss -Hltnp "sport = :$port" | head -n 1)"
			fi
		done
	done

	local route
	for route in "$CLUSTER_POD_CIDR" "$CLUSTER_NODE_POD_CIDR" "$CLUSTER_SERVICE_CIDR"; do
		if ip -4 route show exact "$route" | grep -v -q -e '^unreachable' -e "dev $CLUSTER_BRIDGE "; then
			die "$route is already routed on this machine ($(ip -4 route show exact "$route")); the cluster needs it"
		fi
	done
}

setup_network() {
	# Saved once, so down.sh restores what the machine had before the first cluster-up.
	[[ -f $CLUSTER_RUN_DIR/ip_forward.orig ]] || cat /proc/sys/net/ipv4/ip_forward >"$CLUSTER_RUN_DIR/ip_forward.orig"
	echo 1 >/proc/sys/net/ipv4/ip_forward
	echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables

	# The bridge exists before any pod so that the API server and kubelet can listen on its address.
	ip link show "$CLUSTER_BRIDGE" >/dev/null 2>&1 || ip link add "$CLUSTER_BRIDGE" type bridge
	ip addr replace "$CLUSTER_NODE_IP/${CLUSTER_NODE_POD_CIDR#*/}" dev "$CLUSTER_BRIDGE"
	ip link set "$CLUSTER_BRIDGE" up

	# Pod addresses beyond the node's /24 (which the bridge's more specific route serves) fail
	# here instead of following the default route off the machine.
	ip route replace unreachable "$CLUSTER_POD_CIDR"
	# Service addresses go to the bridge, as on a real node: the host's own connections to a
	# ClusterIP need a route before kube-proxy's DNAT applies, and an address without a
	# Service finds nobody on the bridge rather than leaving the machine.
	ip route replace "$CLUSTER_SERVICE_CIDR" dev "$CLUSTER_BRIDGE"
	# Pods may reach each other, services and the node, but nothing beyond this machine.
	local rule=(FORWARD -i "$CLUSTER_BRIDGE" ! -o "$CLUSTER_BRIDGE" -m comment --comment "$CLUSTER_FORWARD_COMMENT" -j REJECT)
	iptables -C "${rule[@]}" 2>/dev/null || iptables -I "${rule[@]}"
}

# cert NAME SUBJECT EXTENSIONS [CA]: a P-256 key and certificate valid for ten years; self-signed
# when no CA is given. Kept when it exists, so clients and kubeconfigs stay valid across restarts.
cert() {
	local name=$1 subject=$2 extensions=$3 ca=${4:-}
	[[ -f $CLUSTER_PKI/$name.crt ]] && return
	local signer=()
	[[ -n $ca ]] && signer=(-CA "$CLUSTER_PKI/$ca.crt" -CAkey "$CLUSTER_PKI/$ca.key")
	openssl req -x509 -config <(printf '[req]\ndistinguished_name=dn\nprompt=no\n[dn]\n[ext]\n%s\n' "$extensions") \
		-extensions ext -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 -subj "$subject" \
		-keyout "$CLUSTER_PKI/$name.key" -out "$CLUSTER_PKI/$name.crt.tmp" "${signer[@]}" 2>>"$CLUSTER_LOGS/pki.log"
	mv "$CLUSTER_PKI/$name.crt.tmp" "$CLUSTER_PKI/$name.crt"
}

LEAF_CERT_EXTENSIONS=$'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nauthorityKeyIdentifier=keyid'
CLIENT_CERT_EXTENSIONS=$LEAF_CERT_EXTENSIONS$'\nextendedKeyUsage=clientAuth'

make_pki() {
	mkdir -p "$CLUSTER_PKI"
	local ca_ext=$'basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash'
	local leaf=$LEAF_CERT_EXTENSIONS client=$CLIENT_CERT_EXTENSIONS
	cert ca "/CN=etcd-operator-cluster-ca" "$ca_ext"
	cert apiserver "/CN=kube-apiserver" "$leaf"$'\nextendedKeyUsage=serverAuth\nsubjectAltName='"IP:$CLUSTER_NODE_IP,IP:$CLUSTER_API_SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" ca
	cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client" ca
	cert admin "/O=system:masters/CN=kubernetes-admin" "$client" ca
	cert controller-manager "/CN=system:kube-controller-manager" "$client" ca
	cert scheduler "/CN=system:kube-scheduler" "$client" ca
	cert kubelet "/O=system:nodes/CN=system:node:$CLUSTER_NODE_NAME" "$client" ca
	cert kube-proxy "/CN=system:kube-proxy" "$client" ca
	# The aggregation layer (OLM's packageserver is an aggregated API) authenticates the API
	# server to extension servers with a separate CA.
	cert front-proxy-ca "/CN=front-proxy-ca" "$ca_ext"
	cert front-proxy-client "/CN=front-proxy-client" "$client" front-proxy-ca
	cert registry "/CN=etcd-operator-cluster-registry" "$leaf"$'\nextendedKeyUsage=serverAuth\nsubjectAltName='"IP:${CLUSTER_REGISTRY_TLS%:*}" ca
	if [[ ! -f $CLUSTER_PKI/sa.key ]]; then
		openssl ecparam -name prime256v1 -genkey -noout -out "$CLUSTER_PKI/sa.key.tmp"
		openssl ec -in "$CLUSTER_PKI/sa.key.tmp" -pubout -out "$CLUSTER_PKI/sa.pub" 2>>"$CLUSTER_LOGS/pki.log"
		mv "$CLUSTER_PKI/sa.key.tmp" "$CLUSTER_PKI/sa.key"
	fi
}

# registry_config ADDR [CERT]: the local registry's configuration, listening on ADDR, over HTTPS
# with CERT.crt and CERT.key when CERT is given. Every listener serves the same storage.
registry_config() {
	local addr=$1 cert=${2:-}
	cat <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $CLUSTER_DIR/registry
  delete:
    enabled: true
http:
  addr: $addr
EOF
	[[ -z $cert ]] || printf '  tls:\n    certificate: %s.crt\n    key: %s.key\n' "$cert" "$cert"
}

# put FILE: writes standard input to FILE unless FILE already has that content. kube-proxy
# exits when its config file changes, so a rerun must leave unchanged files untouched.
put() {
	local content
	content=$(cat)
	[[ -f $1 && $(<"$1") == "$content" ]] && return
	printf '%s\n' "$content" >"$1.tmp"
	mv "$1.tmp" "$1"
}

kubeconfig() {
	local name=$1 user=$2
	put "$CONF/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: etcd-operator-cluster
  cluster:
    certificate-authority: $CLUSTER_PKI/ca.crt
    server: https://$CLUSTER_NODE_IP:$CLUSTER_APISERVER_PORT
users:
- name: $user
  user:
    client-certificate: $CLUSTER_PKI/$name.crt
    client-key: $CLUSTER_PKI/$name.key
contexts:
- name: etcd-operator-cluster
  context:
    cluster: etcd-operator-cluster
    user: $user
current-context: etcd-operator-cluster
EOF
}

# containerd_config ROOT STATE SOCKET: a containerd of the cluster's, keeping its data in ROOT and
# its runtime state (tasks, pod network namespaces, runc's) in STATE. The second node's containerd
# differs only in these.
containerd_config() {
	local root=$1 state=$2 socket=$3
	cat <<EOF
version = 2
root = "$root"
state = "$state"
# Plugins that cannot work here; disabled so the log shows real problems only.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "$socket"

[plugins."io.containerd.internal.v1.opt"]
  path = "$root/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$CLUSTER_PAUSE_IMAGE"
  # The VM lacks CAP_SYS_RESOURCE: without this every sandbox fails with
  # "failed to update /proc/self/oom_score_adj: Permission denied".
  restrict_oom_score_adj = true
  # Lets non-root containers (CoreDNS, etcd) bind ports below 1024, as containerd 2 does by default.
  enable_unprivileged_ports = true
  # Pod network namespaces live in our state dir, so down.sh knows which are ours.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${state%/*}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CONF/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$CONF/certs.d"
EOF
}

# kubelet_config SOCKET PORT HEALTHZ_PORT LOGS_DIR CGROUP_ROOT: a kubelet of the cluster's on the
# containerd at SOCKET. The second node's kubelet differs only in these.
kubelet_config() {
	local socket=$1 port=$2 healthz_port=$3 logs=$4 cgroup_root=$5
	cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$socket
# Kubernetes 1.36 refuses cgroup v1 unless told otherwise; this VM has only v1.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
address: $CLUSTER_NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz_port
port: $port
clusterDNS: [$CLUSTER_DNS_IP]
clusterDomain: cluster.local
resolvConf: $CONF/resolv.conf
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $CLUSTER_PKI/ca.crt
authorization:
  mode: Webhook
# A test machine's disk is often mostly full of build caches: evict only when nearly out.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
serializeImagePulls: false
podLogsDir: $logs
# The second node's pods live in cgroups of their own: each kubelet kills what it finds in its
# own cgroups that it did not start.
cgroupRoot: $cgroup_root
EOF
}

write_configs() {
	mkdir -p "$CONF/cni" "$CONF/certs.d/$CLUSTER_REGISTRY"
	local name
	for name in controller-manager scheduler kubelet kube-proxy; do
		kubeconfig "$name" "system:$name"
	done
	kubeconfig admin kubernetes-admin
	put "$CLUSTER_KUBECONFIG" <"$CONF/admin.kubeconfig"

	containerd_config "$CLUSTER_DIR/containerd" "$CLUSTER_RUN_DIR/containerd" "$CLUSTER_CONTAINERD_SOCK" | put "$CONF/containerd.toml"

	printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\n' "$CLUSTER_CONTAINERD_SOCK" "$CLUSTER_CONTAINERD_SOCK" | put "$CLUSTER_CRICTL_CONFIG"

	# The local registry speaks plain HTTP, on loopback only.
	put "$CONF/certs.d/$CLUSTER_REGISTRY/hosts.toml" <<EOF
server = "http://$CLUSTER_REGISTRY"

[host."http://$CLUSTER_REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF

	# The release's public names (ghcr.io/etcd-database/...) come from the local registry, which
	# holds them under the same repositories: the mirror a disconnected cluster is given (containerd
	# registry hosts, or OpenShift's ImageDigestMirrorSet). The server is the mirror too, so that a
	# name the mirror lacks fails here instead of reaching for the public registry.
	if [[ $CLUSTER_MIRRORED_REGISTRY != "$CLUSTER_REGISTRY" ]]; then
		mkdir -p "$CONF/certs.d/$CLUSTER_MIRRORED_REGISTRY"
		put "$CONF/certs.d/$CLUSTER_MIRRORED_REGISTRY/hosts.toml" <<EOF
server = "http://$CLUSTER_REGISTRY"

[host."http://$CLUSTER_REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF
	fi

	mkdir -p "$CONF/certs.d/$CLUSTER_REGISTRY_TLS" "$CONF/certs.d/registry.access.redhat.com"
	put "$CONF/certs.d/$CLUSTER_REGISTRY_TLS/hosts.toml" <<EOF
server = "https://$CLUSTER_REGISTRY_TLS"

[host."https://$CLUSTER_REGISTRY_TLS"]
  capabilities = ["pull", "resolve"]
  ca = "$CLUSTER_PKI/ca.crt"
EOF
	# operator-sdk run bundle-upgrade starts its catalog pod with an init container from this
	# image, whatever its flags say; the local registry holds a stand-in with the sh, cat and gzip
	# that container runs (olm-images builds it).
	put "$CONF/certs.d/registry.access.redhat.com/hosts.toml" <<EOF
server = "https://registry.access.redhat.com"

[host."http://$CLUSTER_REGISTRY"]
  capabilities = ["pull", "resolve"]
EOF

	put "$CONF/cni/10-etcd-operator-cluster.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "etcd-operator-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CLUSTER_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$CLUSTER_NODE_POD_CIDR", "gateway": "$CLUSTER_NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$CLUSTER_RUN_DIR/cni-ipam"
      }
    }
  ]
}
EOF

	registry_config "$CLUSTER_REGISTRY" | put "$CONF/registry.yml"
	# A second process over the same storage: the distribution registry serves one listener.
	registry_config "$CLUSTER_REGISTRY_TLS" "$CLUSTER_PKI/registry" | put "$CONF/registry-tls.yml"

	# Pods with dnsPolicy Default (CoreDNS itself) get no upstream: nothing here resolves names
	# outside the cluster.
	echo "options ndots:5" | put "$CONF/resolv.conf"

	kubelet_config "$CLUSTER_CONTAINERD_SOCK" 10250 10248 "$CLUSTER_DIR/pod-logs" / | put "$CONF/kubelet.yaml"

	put "$CONF/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $CONF/kube-proxy.kubeconfig
hostnameOverride: $CLUSTER_NODE_NAME
clusterCIDR: $CLUSTER_POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [primary]
conntrack:
  # 0 leaves the kernel's conntrack table size alone; resizing it is not allowed in this VM.
  maxPerCore: 0
EOF
}

# start NAME COMMAND...: runs COMMAND in the background unless NAME is already running.
# setsid puts it in a session of its own, so a Ctrl-C on make does not take the cluster down.
start() {
	local name=$1
	shift
	if running "$name"; then
		log "$name already running (pid $(pid_of "$name"))"
		return
	fi
	local exe
	exe=$(readlink -f "$(command -v "$1")")
	setsid "$@" >>"$CLUSTER_LOGS/$name.log" 2>&1 </dev/null &
	local pid=$! tries=0
	# Until setsid has exec'd the command, the process is setsid itself, which running() would
	# take for a process that died and whose PID was reused.
	while [[ $(readlink "/proc/$pid/exe" 2>/dev/null) != "$exe" ]] && kill -0 "$pid" 2>/dev/null && ((tries++ < 100)); do
		sleep 0.02
	done
	echo "$pid $exe" >"$CLUSTER_PIDS/$name.pid"
	log "started $name (pid $pid, log $CLUSTER_LOGS/$name.log)"
}

# alive NAME: fails, with the end of the log, as soon as a started component has exited.
alive() {
	running "$1" && return
	tail -n 20 "$CLUSTER_LOGS/$1.log" >&2 || true
	die "$1 exited (log above, full log $CLUSTER_LOGS/$1.log)"
}

# wait_up SECONDS NAME COMMAND...: waits for COMMAND, failing early if NAME dies meanwhile.
wait_up() {
	local timeout=$1 name=$2 deadline=$((SECONDS + $1))
	shift 2
	until "$@" >/dev/null 2>&1; do
		alive "$name"
		((SECONDS < deadline)) || die "$name not ready after ${timeout}s (log $CLUSTER_LOGS/$name.log)"
		sleep 0.2
	done
}

api() {
	curl -sf --cacert "$CLUSTER_PKI/ca.crt" --cert "$CLUSTER_PKI/admin.crt" --key "$CLUSTER_PKI/admin.key" \
		"https://$CLUSTER_NODE_IP:$CLUSTER_APISERVER_PORT$1"
}

start_runtime_and_storage() {
	start containerd containerd --config "$CONF/containerd.toml"
	start registry docker-registry serve "$CONF/registry.yml"
	start registry-tls docker-registry serve "$CONF/registry-tls.yml"
	# A throwaway test cluster: skipping fsync makes every API write cheaper on a VM disk.
	start etcd "$CLUSTER_ETCD_BIN" --name control-plane --data-dir "$CLUSTER_DIR/etcd" \
		--listen-client-urls "http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT" \
		--advertise-client-urls "http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT" \
		--listen-peer-urls "http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
		--initial-advertise-peer-urls "http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
		--initial-cluster "control-plane=http://127.0.0.1:$CLUSTER_ETCD_PEER_PORT" \
		--unsafe-no-fsync --log-level warn
}

# Every write made by a service account (operators, controllers) is audited: the idle-writes
# benchmark counts the operator's from this log, whatever the kind of object.
write_audit_policy() {
	cat > "$CONF/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts"]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
POLICY
}

start_apiserver() {
	wait_up 30 etcd curl -sf "http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT/health"
	write_audit_policy
	# Kubelet is called at the node's IP: its name resolves nowhere, and looking it up would ask
	# the machine's DNS server.
	start kube-apiserver "$CLUSTER_K8S_BIN/kube-apiserver" \
		--advertise-address="$CLUSTER_NODE_IP" --bind-address="$CLUSTER_NODE_IP" --secure-port="$CLUSTER_APISERVER_PORT" \
		--etcd-servers="http://127.0.0.1:$CLUSTER_ETCD_CLIENT_PORT" \
		--service-cluster-ip-range="$CLUSTER_SERVICE_CIDR" \
		--allow-privileged=true \
		--authorization-mode=Node,RBAC \
		--enable-admission-plugins=NodeRestriction,PodSecurity \
		--client-ca-file="$CLUSTER_PKI/ca.crt" \
		--tls-cert-file="$CLUSTER_PKI/apiserver.crt" --tls-private-key-file="$CLUSTER_PKI/apiserver.key" \
		--kubelet-client-certificate="$CLUSTER_PKI/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$CLUSTER_PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$CLUSTER_PKI/sa.pub" \
		--service-account-signing-key-file="$CLUSTER_PKI/sa.key" \
		--requestheader-client-ca-file="$CLUSTER_PKI/front-proxy-ca.crt" \
		--requestheader-allowed-names=front-proxy-client \
		--requestheader-username-headers=X-Remote-User \
		--requestheader-group-headers=X-Remote-Group \
		--requestheader-extra-headers-prefix=X-Remote-Extra- \
		--proxy-client-cert-file="$CLUSTER_PKI/front-proxy-client.crt" \
		--proxy-client-key-file="$CLUSTER_PKI/front-proxy-client.key" \
		--audit-policy-file="$CONF/audit-policy.yaml" --audit-log-path="$CLUSTER_DIR/audit.log" \
		--audit-log-maxsize=100 --audit-log-maxbackup=1
}

start_node_and_controllers() {
	wait_up 60 kube-apiserver api /readyz
	log "kube-apiserver ready"
	# Single instances: leader election would only delay a restarted component by a lease period.
	start kube-controller-manager "$CLUSTER_K8S_BIN/kube-controller-manager" \
		--kubeconfig="$CONF/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$CONF/controller-manager.kubeconfig" \
		--authorization-kubeconfig="$CONF/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false \
		--use-service-account-credentials=true \
		--service-account-private-key-file="$CLUSTER_PKI/sa.key" --root-ca-file="$CLUSTER_PKI/ca.crt" \
		--cluster-signing-cert-file="$CLUSTER_PKI/ca.crt" --cluster-signing-key-file="$CLUSTER_PKI/ca.key" \
		--cluster-cidr="$CLUSTER_POD_CIDR" --service-cluster-ip-range="$CLUSTER_SERVICE_CIDR"
	start kube-scheduler "$CLUSTER_K8S_BIN/kube-scheduler" \
		--kubeconfig="$CONF/scheduler.kubeconfig" \
		--authentication-kubeconfig="$CONF/scheduler.kubeconfig" \
		--authorization-kubeconfig="$CONF/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false
	start kubelet "$CLUSTER_K8S_BIN/kubelet" \
		--config="$CONF/kubelet.yaml" --kubeconfig="$CONF/kubelet.kubeconfig" \
		--root-dir="$CLUSTER_DIR/kubelet" --cert-dir="$CLUSTER_DIR/kubelet/pki" \
		--hostname-override="$CLUSTER_NODE_NAME" --node-ip="$CLUSTER_NODE_IP"
	start kube-proxy "$CLUSTER_K8S_BIN/kube-proxy" --config="$CONF/kube-proxy.yaml"
}

deploy_addons() {
	local manifest
	for manifest in "$HERE"/manifests/*.yaml; do
		# shellcheck disable=SC2016 # the names of the variables to substitute, not their values
		envsubst '$CLUSTER_COREDNS_IMAGE $CLUSTER_LOCAL_PATH_IMAGE $CLUSTER_BUSYBOX_IMAGE $CLUSTER_DNS_IP $CLUSTER_DIR' <"$manifest"
		echo ---
	done | kubectl apply --server-side --force-conflicts -f - >/dev/null
}

# live_ready NAMESPACE SELECTOR: a pod reports a ready container that really runs now. After a
# restart the API still holds the status from before cluster-down, so a "Ready" whose container
# ID containerd does not run is stale.
live_ready() {
	local running ready
	running=$("$CLUSTER_CRICTL" --config "$CLUSTER_CRICTL_CONFIG" ps --quiet --no-trunc --state running) || return 1
	ready=$(kubectl -n "$1" get pods -l "$2" \
		-o jsonpath='{range .items[*].status.containerStatuses[?(@.ready==true)]}{.containerID}{"\n"}{end}') || return 1
	ready=${ready//containerd:\/\//}
	[[ -n $ready && -n $running ]] && grep -q -F -x -f <(echo "$ready") <<<"$running"
}

wait_ready() {
	wait_up 60 kubelet curl -sf http://127.0.0.1:10248/healthz
	wait_up 60 kubelet kubectl wait --for=condition=Ready "node/$CLUSTER_NODE_NAME" --timeout=1s
	log "node $CLUSTER_NODE_NAME Ready"
	wait_up 90 kubelet live_ready kube-system k8s-app=kube-dns
	wait_up 90 kubelet live_ready local-path-storage app=local-path-provisioner
}

main() {
	local started=$SECONDS
	((EUID == 0)) || die "must run as root: containerd, kubelet and the network setup need it (sudo make cluster-up)"
	export CLUSTER_COREDNS_IMAGE CLUSTER_LOCAL_PATH_IMAGE CLUSTER_BUSYBOX_IMAGE CLUSTER_DNS_IP CLUSTER_DIR
	mkdir -p "$CLUSTER_PIDS" "$CLUSTER_LOGS" "$CONF"
	touch "$CLUSTER_DIR/$CLUSTER_MARKER" "$CLUSTER_RUN_DIR/$CLUSTER_MARKER"
	preflight
	setup_network
	make_pki
	write_configs
	start_runtime_and_storage
	start_apiserver
	wait_up 30 containerd ctr version
	wait_up 30 registry curl -sf "http://$CLUSTER_REGISTRY/v2/"
	wait_up 30 registry-tls curl -sf --cacert "$CLUSTER_PKI/ca.crt" "https://$CLUSTER_REGISTRY_TLS/v2/"
	# shellcheck disable=SC2086 # a list of paths without spaces
	"$HERE/load-images.sh" $CLUSTER_IMAGE_TARS
	start_node_and_controllers
	deploy_addons
	wait_ready
	log "cluster ready in $((SECONDS - started))s"
	echo "export KUBECONFIG=$CLUSTER_KUBECONFIG"
}

# Sourced (by hack/cluster/second-node.sh), it only defines the functions above.
[[ ${BASH_SOURCE[0]} != "$0" ]] || main "$@"
