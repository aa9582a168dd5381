#!/usr/bin/env bash
# The main job, as a user does it, on the local cluster that make demo brought up with OLM and
# this tree's catalog: subscribe to the operator, wait for its CSV to succeed, run the sample
# EtcdCluster, and back it up on a schedule to an S3 server in the cluster.
#
# Environment (make demo sets it): KUBECTL, ETCDCTL, KUBECONFIG, DEMO_NAMESPACE, VERSITYGW_IMAGE,
# DEPLOYED_NAMESPACE and DEPLOYED_DEPLOYMENT (make deploy's operator, stopped if it runs), and
# OPERATOR_NAMESPACE when the operator goes elsewhere than DEMO_NAMESPACE. DEMO_SECURE=1 adds a
# cluster with TLS and authentication, a verified snapshot of it and an in-place restore.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ns=${DEMO_NAMESPACE:?}
# The namespace the operator is installed into: the demo's own (an OperatorGroup for it alone),
# or one that has an OperatorGroup for all namespaces (openshift-operators, as OperatorHub does).
operator_ns=${OPERATOR_NAMESPACE:-$ns}
k() { "${KUBECTL:?}" "$@"; }
kn() { k -n "$ns" "$@"; }
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
fail() { printf '\ndemo: %s\n' "$*" >&2; exit 1; }

# wait_for DESCRIPTION SECONDS COMMAND...: until COMMAND succeeds, a dot every 5 s.
wait_for() {
	local what=$1 seconds=$2
	shift 2
	printf '    waiting for %s (at most %ss) ' "$what" "$seconds"
	local deadline=$((SECONDS + seconds)) tick=0
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || { echo; return 1; }
		sleep 1
		((++tick % 5)) || printf '.'
	done
	echo " done"
}

step "Namespace $ns (Pod Security: restricted)"
k create namespace "$ns" --dry-run=client -o yaml | k apply -f -
k label --overwrite namespace "$ns" pod-security.kubernetes.io/enforce=restricted

# make deploy's operator watches every namespace: two operators must never act on one cluster.
if [ "$(k -n "${DEPLOYED_NAMESPACE:?}" get deployment "${DEPLOYED_DEPLOYMENT:?}" -o jsonpath='{.spec.replicas}' 2>/dev/null || true)" != "" ]; then
	step "Stopping make deploy's operator ($DEPLOYED_NAMESPACE/$DEPLOYED_DEPLOYMENT, scaled to 0): only one operator may act on a cluster"
	k -n "$DEPLOYED_NAMESPACE" scale deployment "$DEPLOYED_DEPLOYMENT" --replicas 0
fi

ko() { k -n "$operator_ns" "$@"; }
k -n olm get catalogsource etcd-operator-catalog
if [ "$operator_ns" = "$ns" ]; then
	step "Installing the operator through OLM: an OperatorGroup for $ns and a Subscription to the catalog"
	sed "s/DEMO_NAMESPACE/$ns/" "$here/operatorgroup.yaml" | kn apply -f -
else
	step "Installing the operator through OLM into $operator_ns, for all namespaces (its OperatorGroup $(ko get operatorgroup -o jsonpath='{.items[0].metadata.name}')), as OperatorHub does"
fi
ko apply -f "$here/subscription.yaml"
installed_csv() { ko get subscription etcd-operator -o jsonpath='{.status.installedCSV}'; }
has_installed_csv() { [ -n "$(installed_csv)" ]; }
wait_for "OLM to resolve the Subscription and install a CSV" 300 has_installed_csv ||
	{ ko get subscription etcd-operator -o yaml; fail "the Subscription has no installed CSV"; }
csv=$(installed_csv)
csv_succeeded() { [ "$(ko get csv "$csv" -o jsonpath='{.status.phase}')" = Succeeded ]; }
if ! wait_for "CSV $csv to reach Succeeded" 300 csv_succeeded; then
	ko get csv "$csv" -o jsonpath='{.status.phase}: {.status.message}{"\n"}'
	# Why its pods do not run, when admission refused them.
	ko get events --field-selector type=Warning -o custom-columns=OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message | tail -n 5
	fail "CSV $csv did not succeed"
fi
ko get csv

step "A 3-member EtcdCluster (config/samples/etcd_v1alpha1_etcdcluster.yaml)"
kn apply -f "$root/config/samples/etcd_v1alpha1_etcdcluster.yaml"
wait_for "EtcdCluster example to be Available" 300 kn wait etcdcluster/example --for=condition=Available --timeout=5s ||
	{ kn get etcdcluster example -o yaml; fail "EtcdCluster example is not Available"; }
kn get etcdcluster example -o wide
# A key, through the client Service (the node routes its cluster IP), for the backup to hold.
client_ip=$(kn get service example-client -o jsonpath='{.spec.clusterIP}')
greet() { "${ETCDCTL:?}" --endpoints "http://$client_ip:2379" --command-timeout=5s put /demo/greeting "hello from make demo"; }
# The Service may route its cluster IP a moment after the cluster reports Available.
wait_for "a write through the client Service" 60 greet || { greet; fail "the cluster took no write through its Service"; }

step "An S3 server in the cluster for the backups, and its bucket"
if ! kn get secret demo-s3-credentials >/dev/null 2>&1; then
	# A random key, written only into the Secret: never printed.
	kn create secret generic demo-s3-credentials --from-literal=AWS_ACCESS_KEY_ID=demo \
		--from-literal=AWS_SECRET_ACCESS_KEY="$(head -c 30 /dev/urandom | base64 | tr -d '/+=')"
fi
sed "s|VERSITYGW_IMAGE|${VERSITYGW_IMAGE:?}|" "$here/s3-server.yaml" | kn apply -f -
wait_for "the S3 server to be ready" 180 kn rollout status deployment/demo-s3 --timeout=5s ||
	fail "the S3 server did not start"
# The bucket, made from this machine through the Service's cluster IP with a signed request
# (the node routes cluster IPs; the key is read into a variable, not echoed).
ip=$(kn get service demo-s3 -o jsonpath='{.spec.clusterIP}')
secret_key=$(kn get secret demo-s3-credentials -o jsonpath='{.data.AWS_SECRET_ACCESS_KEY}' | base64 -d)
# S3 wants the payload's sha256 signed along: here, that of the empty body.
empty_sha256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
# A rollout that is done does not mean a Service that routes to a server that listens: the
# request is made until it is answered (curl's exit 7, could not connect, is that moment).
status=""
make_bucket() {
	status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 --aws-sigv4 "aws:amz:us-east-1:s3" \
		--user "demo:$secret_key" -H "x-amz-content-sha256: $empty_sha256" -X PUT "http://$ip:7070/etcd-backups") || status=""
	[ "$status" = 200 ] || [ "$status" = 409 ]
}
wait_for "the S3 server to answer through its Service and make the bucket" 90 make_bucket || true
unset secret_key
case $status in
200 | 409) echo "    bucket etcd-backups ready (HTTP $status)" ;;
"") fail "the S3 server did not answer at $ip:7070 within 90 s" ;;
*) fail "creating bucket etcd-backups answered HTTP $status" ;;
esac

step "A scheduled EtcdBackup (every 2 minutes, keeping 3), awaited until its first run completes"
sed "s/DEMO_NAMESPACE/$ns/" "$here/backup.yaml" | kn apply -f -
backed_up() { [ -n "$(kn get etcdbackup example-every-2m -o jsonpath='{.status.lastBackup.uri}')" ]; }
wait_for "the first scheduled run (due at the next even minute)" 300 backed_up ||
	{ kn get etcdbackup example-every-2m -o yaml; fail "no backup completed"; }
kn get etcdbackup example-every-2m -o wide
echo "    snapshot: $(kn get etcdbackup example-every-2m -o jsonpath='{.status.lastBackup.uri} (revision {.status.lastBackup.revision}, {.status.lastBackup.sizeBytes} bytes)')"

if [ -n "${DEMO_SECURE:-}" ]; then
	step "A cluster with TLS and authentication: certificates from the operator, user root with a password"
	kn get secret secure-root >/dev/null 2>&1 ||
		kn create secret generic secure-root --from-literal=password="$(head -c 24 /dev/urandom | base64 | tr -d '/+=')"
	kn apply -f - <<EOF
apiVersion: etcd.database.dev/v1alpha1
kind: EtcdCluster
metadata: {name: secure}
spec: {size: 3, version: 3.6.16, storage: {size: 1Gi}, tls: {}, auth: {rootSecretName: secure-root}}
EOF
	wait_for "EtcdCluster secure to be Available" 300 kn wait etcdcluster/secure --for=condition=Available --timeout=5s ||
		{ kn get etcdcluster secure -o yaml; fail "EtcdCluster secure is not Available"; }
	image=$(kn get pod -l etcd.database.dev/cluster=secure -o jsonpath='{.items[0].spec.containers[0].image}')
	# secure_etcdctl ARGS...: etcdctl in a pod of the namespace (restricted, no user ID of its
	# own), over TLS with the client certificate and root's password; prints its output.
	secure_etcdctl() {
		kn delete pod etcdctl --ignore-not-found --wait >/dev/null
		local args
		args=$(printf '"%s", ' "$@")
		kn apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: etcdctl}
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: etcdctl
    image: $image
    command: [etcdctl, ${args%, }]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    env:
    - {name: ETCDCTL_ENDPOINTS, value: "https://secure-client:2379"}
    - {name: ETCDCTL_CACERT, value: /tls/ca.crt}
    - {name: ETCDCTL_CERT, value: /tls/tls.crt}
    - {name: ETCDCTL_KEY, value: /tls/tls.key}
    - {name: ETCDCTL_USER, value: root}
    - {name: ETCDCTL_PASSWORD, valueFrom: {secretKeyRef: {name: secure-root, key: password}}}
    volumeMounts: [{name: tls, mountPath: /tls, readOnly: true}]
  volumes: [{name: tls, secret: {secretName: secure-client-tls}}]
EOF
		kn wait pod etcdctl --for=jsonpath='{.status.phase}'=Succeeded --timeout=2m >/dev/null ||
			{ kn logs etcdctl || true; fail "etcdctl $* did not succeed"; }
		kn logs etcdctl
	}
	echo "    put greeting: $(secure_etcdctl put greeting "hello over TLS")"

	step "A snapshot of it to the S3 server, proven restorable by a verify Job"
	kn apply -f - <<EOF
apiVersion: etcd.database.dev/v1alpha1
kind: EtcdBackup
metadata: {name: secure-snapshot}
spec:
  clusterName: secure
  verify: {}
  destination:
    s3: {bucket: etcd-backups, prefix: secure/, endpoint: "http://demo-s3.$ns.svc:7070", forcePathStyle: true, allowPlainHTTP: true, credentialsSecretName: demo-s3-credentials}
EOF
	verified() { [ "$(kn get etcdbackup secure-snapshot -o jsonpath='{.status.lastVerified.result}')" = Verified ]; }
	wait_for "the snapshot and its verify Job (the snapshot restored in a Job, checked against its record)" 300 verified ||
		{ kn get etcdbackup secure-snapshot -o yaml; fail "the snapshot was not verified"; }
	echo "    $(kn get etcdbackup secure-snapshot -o jsonpath='{.status.lastVerified.uri}: {.status.lastVerified.result} in {.status.lastVerified.duration}')"

	step "The snapshot restored in place: a key written after it is gone, the greeting is back"
	echo "    put written-after: $(secure_etcdctl put written-after the-snapshot)"
	kn apply -f - <<EOF
apiVersion: etcd.database.dev/v1alpha1
kind: EtcdRestore
metadata: {name: secure-back-to-snapshot}
spec:
  source: {backup: {name: secure-snapshot}}
  target: {mode: InPlace, clusterName: secure}
EOF
	restored() { [ "$(kn get etcdrestore secure-back-to-snapshot -o jsonpath='{.status.phase}')" = Completed ]; }
	wait_for "the in-place restore to complete" 600 restored ||
		{ kn get etcdrestore secure-back-to-snapshot -o yaml; fail "the in-place restore did not complete"; }
	kn wait etcdcluster/secure --for=condition=Available --timeout=2m >/dev/null
	[ -z "$(secure_etcdctl get written-after)" ] || fail "written-after survived the restore"
	greeting=$(secure_etcdctl get greeting --print-value-only)
	[ "$greeting" = "hello over TLS" ] || fail "greeting after the restore: '$greeting'"
	echo "    written-after: gone; greeting: $greeting"
	kn delete pod etcdctl --ignore-not-found >/dev/null
fi

step "Everything the operator manages here"
kn get etcd-operator
cat <<EOF

The operator runs as OLM installed it, and the cluster is backed up every 2 minutes. Try:
  export KUBECONFIG=$KUBECONFIG PATH=$(dirname "$KUBECTL"):\$PATH
  kubectl -n $ns get csv                                   # the installed operator
  kubectl -n $ns get etcdcluster -o wide                   # members, version, conditions
  kubectl -n $ns scale etcdcluster example --replicas 5    # learners added, then promoted
  kubectl -n $ns delete pod \$(kubectl -n $ns get pod -l app.kubernetes.io/name=etcd,etcd.database.dev/cluster=example -o jsonpath='{.items[0].metadata.name}')   # a member comes back
  kubectl -n $ns get etcdbackup example-every-2m -o yaml   # each run's snapshot, revision, sha256
  sed s/example-snapshot/example-every-2m/ config/samples/etcd_v1alpha1_etcdrestore.yaml | kubectl -n $ns apply -f -
                                                           # the latest snapshot restored into a new cluster
Stop it all with: make cluster-down (PURGE=1 also deletes its data)
EOF
