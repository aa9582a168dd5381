# cert-manager on the local cluster of hack/cluster.mk, for the tests of the operator's TLS by
# cert-manager. Included by the Makefile after hack/cluster.mk, whose settings (CLUSTER_*,
# cluster_tar, cluster_mod_version, cluster-base-up) it reuses. Not part of CI.
#
# Everything comes from the Go module proxy: the controller, webhook and cainjector from
# hack/tools/cert-manager (see its go.mod for how their main packages are built), the CRDs from the
# deploy/crds directory of the module github.com/cert-manager/cert-manager at the version that
# go.mod pins, the rest from hack/cluster/cert-manager/ (upstream's chart of the same version,
# rendered by hand; its README says what differs).

##@ cert-manager on the local cluster

CERT_MANAGER_VERSION := $(call cluster_mod_version,hack/tools/cert-manager/go.mod,github.com/cert-manager/cert-manager)
CERT_MANAGER_COMPONENTS := controller webhook cainjector
CERT_MANAGER_BIN ?= $(CLUSTER_BIN)/cert-manager/$(CERT_MANAGER_VERSION)
CERT_MANAGER_BINS := $(addprefix $(CERT_MANAGER_BIN)/,$(CERT_MANAGER_COMPONENTS))
# $(call cert_manager_image,COMPONENT): the image the manifests name 127.0.0.1:5000/cert-manager-COMPONENT:v1.21.2.
cert_manager_image = $(CLUSTER_REGISTRY)/cert-manager-$(1):$(CERT_MANAGER_VERSION)
CERT_MANAGER_TARS := $(foreach c,$(CERT_MANAGER_COMPONENTS),$(call cluster_tar,$(call cert_manager_image,$(c))))
CERT_MANAGER_MANIFESTS := hack/cluster/cert-manager
CERT_MANAGER_NAMESPACE := cert-manager
# The manifests as one stream of documents, images renamed to this registry and version.
CERT_MANAGER_RENDER = awk 'FNR == 1 { print "---" } { print }' $(CERT_MANAGER_MANIFESTS)/*.yaml | \
	sed -e 's|127\.0\.0\.1:5000/cert-manager-\([a-z0-9]*\):v1\.21\.2|$(CLUSTER_REGISTRY)/cert-manager-\1:$(CERT_MANAGER_VERSION)|g'
# The CRDs, from the module cache (downloaded first if missing).
CERT_MANAGER_CRDS = $$(cd hack/tools/cert-manager && go mod download github.com/cert-manager/cert-manager && \
	go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)/deploy/crds
CERT_MANAGER_KUBECTL = $(CLUSTER_KUBECTL) --kubeconfig $(CLUSTER_KUBECONFIG)
CERT_MANAGER_TIMEOUT ?= 3m

# One `go build` for the three commands, which share nearly all packages.
$(CERT_MANAGER_BINS) &: hack/tools/cert-manager/go.mod hack/tools/cert-manager/go.sum
	$(call building,cert-manager $(CERT_MANAGER_VERSION),10 min)
	mkdir -p $(CERT_MANAGER_BIN)
	cd hack/tools/cert-manager && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$(CERT_MANAGER_VERSION)" \
		-o $(CERT_MANAGER_BIN)/ $(foreach c,$(CERT_MANAGER_COMPONENTS),github.com/cert-manager/cert-manager/$(c)-binary)
	cd $(CERT_MANAGER_BIN) && $(foreach c,$(CERT_MANAGER_COMPONENTS),mv -f $(c)-binary $(c) &&) true

$(CLUSTER_IMAGES)/cert-manager-%_$(CERT_MANAGER_VERSION).tar: $(CERT_MANAGER_BIN)/% $(CLUSTER_IMAGEBUILDER)
	$(CLUSTER_IMAGEBUILDER) build -tag $(call cert_manager_image,$*) -o $@ -add $<:/app/cmd/$*/$* \
		-entrypoint /app/cmd/$*/$* -user 65532:65532 \
		$(call image_labels,cert-manager-$*,cert-manager's $* built from the Go module proxy for the local cluster,$(CERT_MANAGER_VERSION))

.PHONY: cert-manager-images
cert-manager-images: $(CERT_MANAGER_TARS) ## Build cert-manager's controller, webhook and cainjector (bin/cert-manager/) and their images into bin/images/.

# Ready means the webhook answers for the API: its Deployment is rolled out, the cainjector has put
# its CA into the webhook configurations, and a server-side dry run of an Issuer passes them.
.PHONY: cert-manager-up
cert-manager-up: cluster-base-up cert-manager-images ## Not in CI: run cert-manager (controller, webhook, cainjector) in namespace cert-manager on the local cluster, with its CRDs, and wait until its webhook answers.
	@$(CLUSTER_ENV) hack/cluster/load-images.sh $(CERT_MANAGER_TARS)
	crds=$(CERT_MANAGER_CRDS) && $(CERT_MANAGER_KUBECTL) apply --server-side --force-conflicts -f "$$crds" && \
		$(CERT_MANAGER_KUBECTL) wait --for=condition=Established --timeout=1m -f "$$crds"
	$(CERT_MANAGER_RENDER) | $(CERT_MANAGER_KUBECTL) apply --server-side --force-conflicts -f -
	$(foreach d,cert-manager-cainjector cert-manager cert-manager-webhook,\
		$(CERT_MANAGER_KUBECTL) -n $(CERT_MANAGER_NAMESPACE) rollout status deployment/$(d) --timeout=$(CERT_MANAGER_TIMEOUT) &&) true
	for i in $$(seq 60); do \
		ca=$$($(CERT_MANAGER_KUBECTL) get validatingwebhookconfiguration cert-manager-webhook -o jsonpath='{.webhooks[0].clientConfig.caBundle}'); \
		[ -n "$$ca" ] && printf '%s\n' 'apiVersion: cert-manager.io/v1' 'kind: Issuer' \
			'metadata: {name: cert-manager-up-check, namespace: $(CERT_MANAGER_NAMESPACE)}' 'spec: {selfSigned: {}}' | \
			$(CERT_MANAGER_KUBECTL) create --dry-run=server -o name -f - >/dev/null 2>&1 && break; \
		sleep 2; \
	done; \
	[ -n "$$ca" ] || { echo "the cainjector did not inject the webhook's CA" >&2; exit 1; }
	printf '%s\n' 'apiVersion: cert-manager.io/v1' 'kind: Issuer' \
		'metadata: {name: cert-manager-up-check, namespace: $(CERT_MANAGER_NAMESPACE)}' 'spec: {selfSigned: {}}' | \
		$(CERT_MANAGER_KUBECTL) create --dry-run=server -f -
	$(CERT_MANAGER_KUBECTL) -n $(CERT_MANAGER_NAMESPACE) get pods -o wide

# The webhook configurations go first, so that nothing waits on a webhook being deleted; the CRDs
# last, which deletes every cert-manager resource left in the cluster. Certificates' Secrets stay,
# as cert-manager itself leaves them.
.PHONY: cert-manager-down
cert-manager-down: ## Remove cert-manager from the local cluster: its namespace, RBAC, webhook configurations and CRDs (with every cert-manager resource).
	@if ! $(CERT_MANAGER_KUBECTL) get --raw /readyz >/dev/null 2>&1; then echo "the local cluster is not running: nothing to do"; exit 0; fi; \
	set -x; \
	$(CERT_MANAGER_KUBECTL) delete validatingwebhookconfiguration,mutatingwebhookconfiguration cert-manager-webhook --ignore-not-found && \
	$(CERT_MANAGER_RENDER) | $(CERT_MANAGER_KUBECTL) delete --ignore-not-found --timeout=3m -f - && \
	$(CERT_MANAGER_KUBECTL) delete --ignore-not-found --timeout=2m -f "$(CERT_MANAGER_CRDS)"

.PHONY: cert-manager-check
cert-manager-check: ## Not in CI: on the running cert-manager (make cert-manager-up), a self-signed ClusterIssuer, a CA Certificate, a CA Issuer and a leaf Certificate issued, then renewed by hand with a new serial (hack/cluster/cert-manager-check.sh).
	KUBECTL=$(CLUSTER_KUBECTL) KUBECONFIG=$(CLUSTER_KUBECONFIG) hack/cluster/cert-manager-check.sh

# The operator looks for cert-manager when it starts: one that started before cert-manager's CRDs
# were installed does not know of it, and is restarted first.
.PHONY: test-cert-manager
test-cert-manager: cert-manager-up cluster-deploy ## Not in CI: the e2e test of tls.provider CertManager against the real cert-manager (make cert-manager-up): a CA issuer chain, a 3-member cluster serving over TLS, its server and peer certificates renewed under writes with no member restarted.
	crd=$$($(CERT_MANAGER_KUBECTL) get crd certificates.cert-manager.io -o jsonpath='{.metadata.creationTimestamp}') && \
	started=$$($(CERT_MANAGER_KUBECTL) -n $(CLUSTER_OPERATOR_NAMESPACE) get pods -l app.kubernetes.io/name=etcd-operator,app.kubernetes.io/component=manager \
		-o jsonpath='{.items[0].status.startTime}') && \
	if [ "$$started" \< "$$crd" ]; then \
		echo "the operator started ($$started) before cert-manager's CRDs were installed ($$crd): restarting it"; \
		$(CERT_MANAGER_KUBECTL) -n $(CLUSTER_OPERATOR_NAMESPACE) rollout restart deployment/$(CLUSTER_OPERATOR_DEPLOYMENT) && \
		$(CERT_MANAGER_KUBECTL) -n $(CLUSTER_OPERATOR_NAMESPACE) rollout status deployment/$(CLUSTER_OPERATOR_DEPLOYMENT) --timeout=3m; \
	fi
	$(CLUSTER_E2E_ENV) go test -tags e2e $(CLUSTER_E2E_GO_TEST_FLAGS) -run '^TestCertManager(CARotation)?$$' ./test/e2e/
