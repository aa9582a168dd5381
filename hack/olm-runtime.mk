# OLM itself (operator-lifecycle-manager), running on the local cluster of hack/cluster.mk, so that
# the bundle and catalog of hack/olm.mk are installed the way users install them. Included by the
# Makefile after hack/cluster.mk and hack/olm.mk, whose cluster settings (CLUSTER_*, cluster_tar,
# cluster-base-up) and catalog targets (catalog-build, catalog-push, bundle-build, bundle-push) it
# reuses. `make cluster-up` is the cluster with OLM: cluster-base-up, then olm-up.
#
# Everything comes from the Go module proxy: OLM's commands from hack/tools/olm, its CRDs from
# github.com/operator-framework/api at the root go.mod's version, the manifests from
# hack/cluster/olm/ (adapted from OLM's deploy/chart of the same version). Nothing is pulled from
# outside: every image the OLM pods run, or start, is in the local registry.

##@ OLM on the local cluster

olm_runtime_mod_version = $(shell awk '{ for (i = 1; i < NF; i++) if ($$i == "$(2)") { print $$(i+1); exit } }' $(1))
OLM_RUNTIME_VERSION := $(call olm_runtime_mod_version,hack/tools/olm/go.mod,github.com/operator-framework/operator-lifecycle-manager)
OLM_RUNTIME_OPM_VERSION := $(call olm_runtime_mod_version,hack/tools/opm/go.mod,github.com/operator-framework/operator-registry)

OLM_RUNTIME_BIN ?= $(CLUSTER_BIN)/olm
OLM_RUNTIME_CMDS := olm catalog copy-content package-server cpb
OLM_RUNTIME_BINS := $(addprefix $(OLM_RUNTIME_BIN)/,$(OLM_RUNTIME_CMDS))
OLM_RUNTIME_OPM ?= $(or $(OPM),$(CLUSTER_BIN)/opm)
OLM_RUNTIME_GRPC_HEALTH_PROBE ?= $(or $(GRPC_HEALTH_PROBE),$(CLUSTER_BIN)/grpc_health_probe)

# The manifests name these images literally (127.0.0.1:5000/olm:v0.42.0, .../opm:v1.73.0); olm-up
# rewrites them to these, so another REGISTRY or a raised version needs no manifest edit.
OLM_RUNTIME_IMAGE ?= $(CLUSTER_REGISTRY)/olm:$(OLM_RUNTIME_VERSION)
OLM_RUNTIME_OPM_IMAGE ?= $(CLUSTER_REGISTRY)/opm:$(OLM_RUNTIME_OPM_VERSION)
OLM_RUNTIME_TARS := $(call cluster_tar,$(OLM_RUNTIME_IMAGE)) $(call cluster_tar,$(OLM_RUNTIME_OPM_IMAGE))
OLM_RUNTIME_MANIFESTS := hack/cluster/olm
# The manifests as one stream of documents, images rewritten.
OLM_RUNTIME_RENDER = awk 'FNR == 1 { print "---" } { print }' $(OLM_RUNTIME_MANIFESTS)/*.yaml | \
	sed -e 's|127\.0\.0\.1:5000/olm:v0\.42\.0|$(OLM_RUNTIME_IMAGE)|g' -e 's|127\.0\.0\.1:5000/opm:v1\.73\.0|$(OLM_RUNTIME_OPM_IMAGE)|g'
OLM_RUNTIME_KUBECTL = $(CLUSTER_KUBECTL) --kubeconfig $(CLUSTER_KUBECONFIG)
OLM_RUNTIME_TIMEOUT ?= 5m
OLM_RUNTIME_CATALOG_SOURCE ?= etcd-operator-catalog

# One `go build` for the five commands, which share nearly all packages: 4 min 51 s on 2 cores with
# the module cache already holding most dependencies (from the opm and operator-sdk builds).
# cpb is OLM's util/cpb, which bundle unpack Jobs copy out of the util image.
$(OLM_RUNTIME_BINS) &: hack/tools/olm/go.mod hack/tools/olm/go.sum
	$(call building,OLM $(OLM_RUNTIME_VERSION),a few minutes)
	mkdir -p $(OLM_RUNTIME_BIN)
	cd hack/tools/olm && CGO_ENABLED=0 go build -trimpath \
		-ldflags "-X github.com/operator-framework/operator-lifecycle-manager/pkg/version.OLMVersion=$(OLM_RUNTIME_VERSION)" \
		-o $(OLM_RUNTIME_BIN)/ \
		$(foreach c,olm catalog copy-content package-server,github.com/operator-framework/operator-lifecycle-manager/cmd/$(c)) \
		github.com/operator-framework/operator-lifecycle-manager/util/cpb
	touch $(OLM_RUNTIME_BINS)

# Upstream's image is distroless with busybox's cp at /bin/cp, which bundle unpack Jobs run; here
# busybox-static is the only other file, linked as cp only (no sh on the PATH).
$(call cluster_tar,$(OLM_RUNTIME_IMAGE)): $(OLM_RUNTIME_BINS) $(CLUSTER_IMAGEBUILDER) | cluster-packages
	$(CLUSTER_IMAGEBUILDER) build -tag $(OLM_RUNTIME_IMAGE) -o $@ \
		$(foreach c,$(OLM_RUNTIME_CMDS),-add $(OLM_RUNTIME_BIN)/$(c):/bin/$(c)) \
		-add /bin/busybox:/bin/busybox -link /bin/cp:busybox \
		-entrypoint /bin/olm -user 65532:65532 \
		$(call image_labels,olm,Operator Lifecycle Manager's commands built from the Go module proxy with busybox's cp,$(OLM_RUNTIME_VERSION),Apache-2.0 AND GPL-2.0-only)

# What upstream's quay.io/operator-framework/opm image holds: the catalog operator runs
# `opm alpha bundle extract` from it in bundle unpack Jobs.
$(call cluster_tar,$(OLM_RUNTIME_OPM_IMAGE)): $(OLM_RUNTIME_OPM) $(OLM_RUNTIME_GRPC_HEALTH_PROBE) $(CLUSTER_IMAGEBUILDER)
	$(CLUSTER_IMAGEBUILDER) build -tag $(OLM_RUNTIME_OPM_IMAGE) -o $@ \
		-add $(OLM_RUNTIME_OPM):/bin/opm -add $(OLM_RUNTIME_GRPC_HEALTH_PROBE):/bin/grpc_health_probe \
		-entrypoint /bin/opm -user 65532:65532 \
		$(call image_labels,opm,operator-registry's opm and grpc_health_probe built from the Go module proxy,$(OLM_RUNTIME_OPM_VERSION))

# What operator-sdk run bundle runs its one-bundle catalog from, offline: --index-image (its pod
# runs `sh -c "opm serve ..."`; the label tells operator-sdk the index is a file-based catalog, with
# nothing in it yet) and the image its init container unpacks the catalog with (sh, cat, gzip).
# run bundle-upgrade has no flag for the latter and always names registry.access.redhat.com's
# ubi9/ubi:9.7, which containerd takes from the local registry (hack/cluster/up.sh).
OLM_RUNTIME_INDEX_IMAGE ?= $(CLUSTER_REGISTRY)/opm-index:$(OLM_RUNTIME_OPM_VERSION)
OLM_RUNTIME_UNPACK_IMAGE ?= $(CLUSTER_REGISTRY)/ubi9/ubi:9.7
OLM_RUNTIME_RUN_BUNDLE_TARS := $(call cluster_tar,$(OLM_RUNTIME_INDEX_IMAGE)) $(call cluster_tar,$(OLM_RUNTIME_UNPACK_IMAGE))

# A test bundle one patch version past this tree's (v0.2.0 makes v0.2.1): this tree's bundle, the
# same operator image, with only the CSV's name and version raised. The run-bundle e2e test starts
# an upgrade to it while a backup runs, to see OLM hold the upgrade until the backup ends. It is
# pushed to a repository of its own and never enters the catalog: it is not a release.
OLM_RUNTIME_NEXT_VERSION := $(shell echo '$(VERSION)' | awk -F. '{ print $$1 "." $$2 "." $$3 + 1 }')
OLM_RUNTIME_NEXT_BUNDLE_IMAGE ?= $(CLUSTER_REGISTRY)/etcd-operator-test-bundle:v$(OLM_RUNTIME_NEXT_VERSION)

.PHONY: olm-next-bundle
olm-next-bundle: ## Build and push the test bundle one patch version past this tree's (the same operator, never in the catalog).
	work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && \
	cp -r bundle bundle.Dockerfile "$$work/" && \
	csv="$$work/bundle/manifests/$(PACKAGE).clusterserviceversion.yaml" && \
	sed -i -e 's/^  name: $(PACKAGE)\.v$(VERSION)$$/  name: $(PACKAGE).v$(OLM_RUNTIME_NEXT_VERSION)/' \
		-e 's/^  version: $(VERSION)$$/  version: $(OLM_RUNTIME_NEXT_VERSION)/' "$$csv" && \
	{ grep -qx '  name: $(PACKAGE).v$(OLM_RUNTIME_NEXT_VERSION)' "$$csv" && grep -qx '  version: $(OLM_RUNTIME_NEXT_VERSION)' "$$csv" || \
		{ echo "bundle/ is not version $(VERSION): its CSV's name and version could not be raised" >&2; exit 1; }; } && \
	$(MAKE) --no-print-directory bundle-build bundle-push BUNDLE_DIR="$$work" BUNDLE_IMG=$(OLM_RUNTIME_NEXT_BUNDLE_IMAGE) \
		VERSION=$(OLM_RUNTIME_NEXT_VERSION)

$(call cluster_tar,$(OLM_RUNTIME_INDEX_IMAGE)): $(OLM_RUNTIME_OPM) $(CLUSTER_IMAGEBUILDER) | cluster-packages
	$(CLUSTER_IMAGEBUILDER) build -tag $(OLM_RUNTIME_INDEX_IMAGE) -o $@ -add $(OLM_RUNTIME_OPM):/bin/opm \
		$(CLUSTER_BUSYBOX_FILES) -add /dev/null:/configs/.indexignore:0644 \
		-label operators.operatorframework.io.index.configs.v1=/configs -entrypoint /bin/opm -user 65532:65532 \
		$(call image_labels,opm-index,An empty file-based catalog served by opm: operator-sdk run bundle's index image,$(OLM_RUNTIME_OPM_VERSION),Apache-2.0 AND GPL-2.0-only)

$(call cluster_tar,$(OLM_RUNTIME_UNPACK_IMAGE)): $(CLUSTER_IMAGEBUILDER) | cluster-packages
	$(CLUSTER_IMAGEBUILDER) build -tag $(OLM_RUNTIME_UNPACK_IMAGE) -o $@ \
		$(CLUSTER_BUSYBOX_FILES) -cmd sh -user 65532:65532 \
		$(call image_labels,ubi,Debian's busybox-static standing in for the ubi9/ubi image operator-sdk run bundle-upgrade names,$(CLUSTER_BUSYBOX_VERSION),GPL-2.0-only)

.PHONY: olm-images
olm-images: $(OLM_RUNTIME_TARS) ## Build OLM's binaries (bin/olm/) and its two images (olm, opm) into bin/images/.

# CRDs server-side: the CSV CRD is too big for client-side apply's last-applied annotation.
.PHONY: olm-up
olm-up: cluster-base-up olm-images ## Start OLM on the local cluster (starting the cluster if needed) and wait for its pods and packageserver.
	@$(CLUSTER_ENV) hack/cluster/load-images.sh $(OLM_RUNTIME_TARS)
	api=$$(go list -m -f '{{.Dir}}' github.com/operator-framework/api) && [ -d "$$api/crds" ] || \
		{ go mod download github.com/operator-framework/api && api=$$(go list -m -f '{{.Dir}}' github.com/operator-framework/api); } && \
	$(OLM_RUNTIME_KUBECTL) apply --server-side --force-conflicts -f "$$api/crds/" && \
	$(OLM_RUNTIME_KUBECTL) wait --for=condition=Established --timeout=1m -f "$$api/crds/"
	$(OLM_RUNTIME_RENDER) | $(OLM_RUNTIME_KUBECTL) apply --server-side --force-conflicts -f -
	$(OLM_RUNTIME_KUBECTL) -n olm rollout status deployment/olm-operator --timeout=$(OLM_RUNTIME_TIMEOUT)
	$(OLM_RUNTIME_KUBECTL) -n olm rollout status deployment/catalog-operator --timeout=$(OLM_RUNTIME_TIMEOUT)
	$(OLM_RUNTIME_KUBECTL) -n olm wait csv/packageserver --for=jsonpath='{.status.phase}'=Succeeded --timeout=$(OLM_RUNTIME_TIMEOUT)
	$(OLM_RUNTIME_KUBECTL) wait apiservice/v1.packages.operators.coreos.com --for=condition=Available --timeout=$(OLM_RUNTIME_TIMEOUT)
	$(OLM_RUNTIME_KUBECTL) -n olm get pods -o wide

# The operator image the bundle's CSV names (IMG), the bundle image and the catalog image, and the
# operator and bundle images of every earlier release the catalog serves (release-images), all in
# the local registry; then a CatalogSource of the catalog image in olm, awaited until READY.
# Pushed again under the same tags, the images would not be seen: OLM's registry pod pulls the
# catalog image only when it starts, and bundles it unpacked once are kept (a Job, and a ConfigMap
# of the same name). Both go, so that OLM serves what was just pushed.
.PHONY: olm-catalog
olm-catalog: olm-up cluster-operator-image release-images $(OLM_RUNTIME_RUN_BUNDLE_TARS) ## Push the operator, bundle and catalog images of this tree and of the earlier releases, and add the catalog to OLM as CatalogSource olm/etcd-operator-catalog.
	@$(CLUSTER_ENV) hack/cluster/load-images.sh $(CLUSTER_OPERATOR_TAR) $(OLM_RELEASE_TARS) $(OLM_RUNTIME_RUN_BUNDLE_TARS)
	$(MAKE) --no-print-directory release-push bundle-build bundle-push catalog-build catalog-push olm-next-bundle PUSH_REGISTRY=$(CLUSTER_REGISTRY)
	$(MAKE) --no-print-directory olm-catalog-source

# What an install of this tree's head needs (make demo): its operator, bundle and catalog images;
# the catalog still lists the earlier releases, whose images only an upgrade from them needs.
.PHONY: olm-catalog-head
olm-catalog-head: olm-up cluster-operator-image
	@$(CLUSTER_ENV) hack/cluster/load-images.sh $(CLUSTER_OPERATOR_TAR)
	$(MAKE) --no-print-directory bundle-build bundle-push catalog-build catalog-push PUSH_REGISTRY=$(CLUSTER_REGISTRY)
	$(MAKE) --no-print-directory olm-catalog-source

.PHONY: olm-catalog-source
olm-catalog-source:
	unpacked=$$($(OLM_RUNTIME_KUBECTL) -n olm get jobs -l operatorframework.io/bundle-unpack-ref -o jsonpath='{.items[*].metadata.name}'); \
	[ -z "$$unpacked" ] || $(OLM_RUNTIME_KUBECTL) -n olm delete jobs,configmaps $$unpacked --ignore-not-found
	$(OLM_RUNTIME_KUBECTL) -n olm delete pods -l olm.catalogSource=$(OLM_RUNTIME_CATALOG_SOURCE) --ignore-not-found
	sed -e 's|image: .*|image: $(CATALOG_IMG)|' -e 's|name: etcd-operator-catalog|name: $(OLM_RUNTIME_CATALOG_SOURCE)|' \
		$(OLM_RUNTIME_MANIFESTS)/catalog/catalogsource.yaml | $(OLM_RUNTIME_KUBECTL) apply --server-side --force-conflicts -f -
	# OLM may run a second registry pod while it replaces the first: ready is every pod's
	# containers' readiness ("true true" then), and each must be.
	for i in $$(seq 150); do \
		ready=$$($(OLM_RUNTIME_KUBECTL) -n olm get pods -l olm.catalogSource=$(OLM_RUNTIME_CATALOG_SOURCE) -o jsonpath='{.items[*].status.containerStatuses[*].ready}'); \
		state=$$($(OLM_RUNTIME_KUBECTL) -n olm get catalogsource $(OLM_RUNTIME_CATALOG_SOURCE) -o jsonpath='{.status.connectionState.lastObservedState}'); \
		case "$$ready" in ""|*false*) ready=no ;; *) ready=yes ;; esac; \
		[ "$$ready" = yes ] && [ "$$state" = READY ] && break; sleep 2; \
	done; \
	$(OLM_RUNTIME_KUBECTL) -n olm get catalogsource $(OLM_RUNTIME_CATALOG_SOURCE); \
	[ "$$ready" = yes ] && [ "$$state" = READY ] || \
		{ echo "CatalogSource $(OLM_RUNTIME_CATALOG_SOURCE) is not READY: $$state (registry pod ready: $$ready)" >&2; exit 1; }

# The APIService goes first: left behind without its packageserver, it makes API discovery fail
# for every client. CSVs are deleted before the CRDs while olm-operator still runs, so that it
# removes their deployments. OLM's own objects of the manifests (OLMConfig, OperatorGroups, the
# packageserver CSV) go with their namespaces and CRDs, so a second olm-down finds nothing to fail
# on. Last, the RBAC OLM generated (labelled olm.managed), which nothing garbage-collects. CRDs
# that bundles installed (etcd.database.dev) stay, as OLM itself leaves them.
.PHONY: cluster-up
cluster-up: olm-up ## Start the local cluster with OLM running (idempotent); prints the KUBECONFIG to use.

.PHONY: olm-down
olm-down: ## Remove OLM from the local cluster: its APIService, namespaces, RBAC and CRDs (the cluster keeps running).
	@if ! $(OLM_RUNTIME_KUBECTL) get --raw /readyz >/dev/null 2>&1; then echo "the local cluster is not running: nothing to do"; exit 0; fi; \
	set -x; \
	$(OLM_RUNTIME_KUBECTL) delete apiservice v1.packages.operators.coreos.com --ignore-not-found --wait=false; \
	if $(OLM_RUNTIME_KUBECTL) get crd subscriptions.operators.coreos.com >/dev/null 2>&1; then \
		$(OLM_RUNTIME_KUBECTL) delete subscriptions.operators.coreos.com,catalogsources.operators.coreos.com,clusterserviceversions.operators.coreos.com \
			--all-namespaces --all --ignore-not-found --timeout=2m; \
	fi; \
	$(OLM_RUNTIME_RENDER) | awk 'BEGIN { RS = "\n---\n" } !/(^|\n)apiVersion: operators\.coreos\.com\// { print "---"; print }' | \
		$(OLM_RUNTIME_KUBECTL) delete --ignore-not-found --timeout=3m -f - ; \
	api=$$(go list -m -f '{{.Dir}}' github.com/operator-framework/api); \
	$(OLM_RUNTIME_KUBECTL) delete --ignore-not-found --timeout=2m -f "$$api/crds/"; \
	$(OLM_RUNTIME_KUBECTL) delete clusterroles,clusterrolebindings -l olm.managed=true --ignore-not-found; \
	$(OLM_RUNTIME_KUBECTL) delete roles,rolebindings,serviceaccounts --all-namespaces -l olm.managed=true --ignore-not-found

# operator-sdk scorecard runs each test of bundle/tests/scorecard/config.yaml in a pod: the test
# image upstream publishes as quay.io/operator-framework/scorecard-test is built here from the same
# operator-sdk version, and the config is given to scorecard with the image renamed, so that the
# bundle keeps naming upstream's. The init container that unpacks the bundle (--untar-image: tar
# with gzip) is the cluster's busybox; the storage sidecar (--storage-image: sh) is not started,
# as no test asks for storage. The tests read only the bundle: no operator needs to run, and
# scorecard exits non-zero when one fails.
OLM_RUNTIME_SCORECARD_TEST ?= $(CLUSTER_BIN)/scorecard-test
OLM_RUNTIME_SCORECARD_IMAGE ?= $(CLUSTER_REGISTRY)/scorecard-test:$(OPERATOR_SDK_VERSION)
OLM_RUNTIME_SCORECARD_NAMESPACE ?= etcd-operator-scorecard
# The tests' logs run to thousands of lines (whole CRDs): the report goes here, a summary to stdout.
OLM_RUNTIME_SCORECARD_REPORT ?= $(CLUSTER_BIN)/scorecard-report.txt

$(OLM_RUNTIME_SCORECARD_TEST): hack/tools/operator-sdk/go.mod
	cd hack/tools/operator-sdk && CGO_ENABLED=0 go build -o $@ github.com/operator-framework/operator-sdk/images/scorecard-test

$(call cluster_tar,$(OLM_RUNTIME_SCORECARD_IMAGE)): $(OLM_RUNTIME_SCORECARD_TEST) $(CLUSTER_IMAGEBUILDER)
	$(CLUSTER_IMAGEBUILDER) build -tag $(OLM_RUNTIME_SCORECARD_IMAGE) -o $@ \
		-add $(OLM_RUNTIME_SCORECARD_TEST):/usr/local/bin/scorecard-test -env PATH=/usr/local/bin \
		-entrypoint /usr/local/bin/scorecard-test -user 65532:65532 \
		$(call image_labels,scorecard-test,operator-sdk's scorecard tests built from the Go module proxy,$(OPERATOR_SDK_VERSION))

.PHONY: olm-scorecard
olm-scorecard: cluster-base-up $(OPERATOR_SDK) $(call cluster_tar,$(OLM_RUNTIME_SCORECARD_IMAGE)) ## Run operator-sdk scorecard's basic and OLM suites on bundle/ in the local cluster (namespace etcd-operator-scorecard).
	@$(CLUSTER_ENV) hack/cluster/load-images.sh $(call cluster_tar,$(OLM_RUNTIME_SCORECARD_IMAGE))
	$(OLM_RUNTIME_KUBECTL) create namespace $(OLM_RUNTIME_SCORECARD_NAMESPACE) --dry-run=client -o yaml | \
		$(OLM_RUNTIME_KUBECTL) apply -f -
	work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && \
	sed 's|image: quay\.io/operator-framework/scorecard-test:.*|image: $(OLM_RUNTIME_SCORECARD_IMAGE)|' \
		bundle/tests/scorecard/config.yaml > "$$work/config.yaml" && \
	$(OPERATOR_SDK) scorecard ./bundle --kubeconfig $(CLUSTER_KUBECONFIG) --namespace $(OLM_RUNTIME_SCORECARD_NAMESPACE) \
		--config "$$work/config.yaml" --untar-image $(CLUSTER_BUSYBOX_IMAGE) --storage-image $(CLUSTER_BUSYBOX_IMAGE) \
		--wait-time 3m > $(OLM_RUNTIME_SCORECARD_REPORT) 2>&1 || \
		{ cat $(OLM_RUNTIME_SCORECARD_REPORT); echo "scorecard failed (report above)" >&2; exit 1; }
	grep -E '^\s+(Name|State):' $(OLM_RUNTIME_SCORECARD_REPORT) | paste - -
	@echo "full report: $(OLM_RUNTIME_SCORECARD_REPORT)"
