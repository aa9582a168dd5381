#!/usr/bin/env bash
# Shows that the cert-manager of make cert-manager-up issues and renews certificates: a
# self-signed ClusterIssuer, a CA Certificate from it, a CA Issuer of that CA and a one-hour leaf
# Certificate from the Issuer, each awaited Ready; the leaf's Secret is shown and checked against
# the CA with openssl; then the leaf is renewed by hand, the way `cmctl renew` does it (the
# Certificate's Issuing condition set to True through its status), and its serial must change.
# Everything is made in namespace cert-manager-check and the ClusterIssuer
# cert-manager-check-selfsigned, deleted at the end (KEEP=1 keeps them).
#
# Environment (make cert-manager-check sets it): KUBECTL, KUBECONFIG.
set -euo pipefail

ns=cert-manager-check
cluster_issuer=cert-manager-check-selfsigned
k() { "${KUBECTL:?}" "$@"; }
kn() { k -n "$ns" "$@"; }
step() { printf '\n==> %s (%ss)\n' "$*" "$SECONDS"; }
fail() { printf 'cert-manager-check: %s\n' "$*" >&2; exit 1; }

cleanup() {
	[[ ${KEEP:-} == 1 ]] && return
	k delete namespace "$ns" --ignore-not-found --wait=false >/dev/null
	k delete clusterissuer "$cluster_issuer" --ignore-not-found >/dev/null
}
trap cleanup EXIT

# leaf_serial: the serial number of the certificate in the leaf's Secret, empty before it exists.
leaf_serial() {
	kn get secret leaf -o jsonpath='{.data.tls\.crt}' 2>/dev/null | base64 -d | openssl x509 -noout -serial 2>/dev/null |
		sed 's/^serial=//'
}

step "cert-manager's pods"
k -n cert-manager get pods -o wide
k create namespace "$ns" --dry-run=client -o yaml | k apply -f - >/dev/null

step "a self-signed ClusterIssuer, a CA Certificate from it, a CA Issuer and a leaf Certificate"
k apply -f - <<EOF
apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata:
  name: $cluster_issuer
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: ca
  namespace: $ns
spec:
  isCA: true
  commonName: cert-manager-check-ca
  secretName: ca
  duration: 24h
  privateKey:
    algorithm: ECDSA
    size: 256
  issuerRef:
    kind: ClusterIssuer
    name: $cluster_issuer
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: ca
  namespace: $ns
spec:
  ca:
    secretName: ca
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: leaf
  namespace: $ns
spec:
  secretName: leaf
  duration: 1h
  renewBefore: 30m
  commonName: leaf.$ns.svc
  dnsNames:
  - leaf.$ns.svc
  usages:
  - server auth
  - client auth
  privateKey:
    algorithm: ECDSA
    size: 256
  issuerRef:
    kind: Issuer
    name: ca
EOF

step "waiting for the ClusterIssuer, the CA Certificate, the Issuer and the leaf to be Ready"
k wait --for=condition=Ready --timeout=2m "clusterissuer/$cluster_issuer"
kn wait --for=condition=Ready --timeout=2m certificate/ca
kn wait --for=condition=Ready --timeout=2m issuer/ca
kn wait --for=condition=Ready --timeout=2m certificate/leaf
kn get certificates,issuers
k get clusterissuer "$cluster_issuer"

step "the leaf's Secret"
kn get secret leaf
work=$(mktemp -d)
trap 'rm -rf "$work"; cleanup' EXIT
kn get secret leaf -o jsonpath='{.data.tls\.crt}' | base64 -d >"$work/tls.crt"
kn get secret leaf -o jsonpath='{.data.ca\.crt}' | base64 -d >"$work/ca.crt"
openssl x509 -in "$work/tls.crt" -noout -subject -issuer -serial -startdate -enddate -ext subjectAltName
openssl verify -CAfile "$work/ca.crt" "$work/tls.crt"
first=$(leaf_serial)
[[ -n $first ]] || fail "the leaf's Secret holds no certificate"

step "renewing the leaf by hand (its Issuing condition set to True, as cmctl renew does)"
generation=$(kn get certificate leaf -o jsonpath='{.metadata.generation}')
kn patch certificate leaf --subresource=status --type=json -p "[{\"op\": \"add\", \"path\": \"/status/conditions/-\", \"value\": {
	\"type\": \"Issuing\", \"status\": \"True\", \"reason\": \"ManuallyTriggered\",
	\"message\": \"Certificate re-issuance manually triggered\", \"observedGeneration\": $generation,
	\"lastTransitionTime\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}}]"
deadline=$((SECONDS + 120))
until second=$(leaf_serial) && [[ -n $second && $second != "$first" ]]; do
	((SECONDS < deadline)) || fail "the leaf's serial is still $first two minutes after the renewal was triggered"
	sleep 1
done
kn wait --for=condition=Ready --timeout=2m certificate/leaf
kn get certificate leaf -o jsonpath='{"revision "}{.status.revision}{", not after "}{.status.notAfter}{"\n"}'
echo "serial before the renewal: $first"
echo "serial after the renewal:  $second"

step "cert-manager issued and renewed the leaf"
