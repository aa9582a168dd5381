# etcd-operator: every workflow is a target here. `make help` lists them.

# Version of the operator and of its OLM bundle.
VERSION ?= 0.2.0
# Where a release's images live: the project's public registry and organisation. Every image the
# bundle, the catalog and config/ name is under it (the operator, etcd, the bundle, the catalog).
# The local cluster pulls these names from its own registry, which mirrors REGISTRY_HOST as a
# disconnected cluster's mirror does (hack/cluster/up.sh). Another registry: make ... REGISTRY=...
REGISTRY ?= ghcr.io/etcd-database
REGISTRY_HOST = $(firstword $(subst /, ,$(REGISTRY)))
PUBLIC_REGISTRY := ghcr.io/etcd-database
# Where the push targets (bundle-push, catalog-push, release-push, images-multiarch-push,
# release-publish) send images: to REGISTRY's own registry, over HTTPS (plain HTTP to one on
# loopback or a private address), with docker login's credentials. The one exception is the
# default, PUBLIC_REGISTRY, which nothing here can push to: its images go to the local cluster's
# registry, which serves them as the mirror of REGISTRY_HOST (hack/cluster.mk); the local cluster's
# own flows (olm-catalog, test-release) always push there. To publish to ghcr.io itself:
# make release-publish PUSH_REGISTRY=ghcr.io.
PUSH_REGISTRY ?= $(if $(filter $(PUBLIC_REGISTRY),$(REGISTRY)),$(CLUSTER_REGISTRY),$(REGISTRY_HOST))
# imagebuilder's arguments for it: an image named in REGISTRY_HOST goes to PUSH_REGISTRY under the
# same repository and tag; one named in PUSH_REGISTRY (a local test image) as it is named.
IMAGE_PUSH = push -registry $(PUSH_REGISTRY) $(if $(filter-out $(REGISTRY_HOST),$(PUSH_REGISTRY)),-mirror-of $(REGISTRY_HOST))
# The name Docker pushes an image as (bundle-push and catalog-push, with a Docker daemon): in
# PUSH_REGISTRY, under the same repository and tag.
push_ref = $(if $(filter $(REGISTRY_HOST)/%,$(1)),$(PUSH_REGISTRY)/$(patsubst $(REGISTRY_HOST)/%,%,$(1)),$(1))
IMG ?= $(REGISTRY)/etcd-operator:v$(VERSION)
# The registry config/manager names the etcd image in (RELATED_IMAGE_ETCD); deploy and bundle
# rename it to REGISTRY's, as they name the operator's IMG, in a copy of config/.
CONFIG_REGISTRY := ghcr.io/etcd-database
config_set_images = $(KUSTOMIZE) edit set image controller=$(IMG) $(CONFIG_REGISTRY)/etcd=$(REGISTRY)/etcd

# The OCI labels (org.opencontainers.image.*) every image built here carries; imagebuilder and
# dockerfile-image refuse an image without them. The source is this repository, which holds every
# image's recipe; the revision the commit it was built from. The license is of what the image
# packages: this project's own is Apache-2.0, as hack/boilerplate.go.txt declares in every
# generated file (the repository has no LICENSE file yet).
IMAGE_SOURCE ?= https://github.com/etcd-database/etcd-operator
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE_LICENSES ?= Apache-2.0
# $(call image_labels,TITLE,DESCRIPTION,VERSION[,LICENSES[,REVISION]]): the -label flags; a
# version's leading v is dropped (v3.6.16 is 3.6.16). In double quotes for the shell; no commas in
# the arguments, as in any $(call).
image_labels = -label "org.opencontainers.image.title=$(strip $(1))" \
	-label "org.opencontainers.image.description=$(strip $(2))" \
	-label "org.opencontainers.image.version=$(patsubst v%,%,$(strip $(3)))" \
	-label "org.opencontainers.image.licenses=$(or $(strip $(4)),$(IMAGE_LICENSES))" \
	-label "org.opencontainers.image.revision=$(or $(strip $(5)),$(IMAGE_REVISION))" \
	-label "org.opencontainers.image.source=$(IMAGE_SOURCE)"
OPERATOR_IMAGE_DESCRIPTION := etcd Operator: runs etcd clusters on Kubernetes and backs them up and restores them; also the agent of its backup and restore Jobs

# Pinned versions (see docs/development.md, "Versions").
KUBERNETES_VERSION ?= v1.36.3
# The oldest Kubernetes the bundle installs on, pinned in one place: hack/tools/kube-min/go.mod.
# The CSV's minKubeVersion must name its minor version; test/minkube fails otherwise.
KUBERNETES_MIN_VERSION := $(shell awk '$$1 == "require" && $$2 == "k8s.io/kubernetes" { print $$3 }' hack/tools/kube-min/go.mod)
ETCD_VERSION ?= v3.6.16
ETCD_NEXT_VERSION ?= v3.7.3
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.7.1
GOLANGCI_LINT_VERSION ?= v2.15.0

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
KUSTOMIZE ?= $(LOCALBIN)/kustomize
OPERATOR_SDK ?= $(LOCALBIN)/operator-sdk
VERSITYGW ?= $(LOCALBIN)/versitygw
PROMTOOL ?= $(LOCALBIN)/promtool
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
K8S_BIN ?= $(LOCALBIN)/k8s
ETCD_BIN ?= $(LOCALBIN)/etcd/$(ETCD_VERSION)
ETCD_NEXT_BIN ?= $(LOCALBIN)/etcd/$(ETCD_NEXT_VERSION)
ENVTEST_ASSETS ?= $(LOCALBIN)/envtest
K8S_MIN_BIN ?= $(LOCALBIN)/k8s-min/$(KUBERNETES_MIN_VERSION)
ENVTEST_MIN_ASSETS ?= $(LOCALBIN)/envtest-min
KUBECTL ?= $(K8S_BIN)/kubectl

GO_TEST_FLAGS ?= -count=1

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9.-]+:.*?##/ { printf "  \033[36m%-20s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRDs and RBAC Role from the markers in api/ and controllers/.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./api/...;./controllers/..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the DeepCopy methods of api/.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## go fmt.
	go fmt ./...

.PHONY: vet
vet: ## go vet, including the build-tagged e2e tests.
	go vet -tags e2e ./...

.PHONY: test
# test/minkube needs the oldest supported kube-apiserver, built for it alone (~3.5 min cold): it
# runs in `make test-minkube`, outside CI's 60-minute budget (docs/development.md, "What runs where").
test: envtest-assets $(CONTROLLER_GEN) $(KUSTOMIZE) $(OPERATOR_SDK) $(VERSITYGW) $(LOCALBIN)/imagebuilder vet lint ## Unit and envtest tests against a real kube-apiserver and etcd, and the Grafana dashboard's queries (hack/dashboard); fails if generated files are stale. The oldest-Kubernetes part is make test-minkube.
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" CONTROLLER_GEN="$(CONTROLLER_GEN)" ETCD_BIN="$(ETCD_BIN)" VERSITYGW="$(VERSITYGW)" \
		go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v /test/minkube)
	cd hack/tools/imagebuilder && go test $(GO_TEST_FLAGS) ./...
	cd hack/tools/dockerfile-image && go test $(GO_TEST_FLAGS) ./...
	cd hack/dashboard && go test $(GO_TEST_FLAGS) ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint (.golangci.yml) over every package, the e2e suite, the two image builders and the dashboard test included.
	$(GOLANGCI_LINT) run --build-tags e2e ./...
	cd hack/tools/imagebuilder && $(GOLANGCI_LINT) run --config ../../../.golangci.yml ./...
	cd hack/tools/dockerfile-image && $(GOLANGCI_LINT) run --config ../../../.golangci.yml ./...
	cd hack/dashboard && $(GOLANGCI_LINT) run --config ../../.golangci.yml ./...

.PHONY: test-alerts
test-alerts: $(PROMTOOL) ## Not in make test yet (promtool's cold build: see docs/monitoring.md): promtool checks and unit-tests the alert rules of config/prometheus against test/alerts.
	dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
		go run ./hack/alertrules config/prometheus/prometheusrule.yaml > "$$dir/rules.yaml" && \
		cp test/alerts/*_test.yaml "$$dir/" && \
		$(PROMTOOL) check rules "$$dir/rules.yaml" && \
		$(PROMTOOL) test rules "$$dir"/*_test.yaml

.PHONY: test-minkube
test-minkube: envtest-min-assets ## Not in CI: test/minkube, and api/'s contract tests, against the oldest supported kube-apiserver.
	MIN_KUBE_ASSETS="$(ENVTEST_MIN_ASSETS)" go test $(GO_TEST_FLAGS) ./test/minkube
	KUBEBUILDER_ASSETS="$(ENVTEST_MIN_ASSETS)" go test $(GO_TEST_FLAGS) ./api/...

.PHONY: model
MODEL_CHECKS ?= 15000
model: ## Not in CI: the quorum-loss recovery against its model of the world, at length: 20 x MODEL_CHECKS random worlds (make test draws 2,000). A failure prints the shrunk trace and the seed to replay it.
	@log=$$(mktemp); status=0; \
		go test -count=1 -v -run '^TestModelQuorumLossRecovery$$' -timeout 60m ./internal/membership -rapid.checks=$(MODEL_CHECKS) >$$log 2>&1 || status=$$?; \
		grep -v '\[rapid\] draw' $$log || true; rm -f $$log; exit $$status

.PHONY: bench
# -p 1: one package's benchmarks at a time; go test would otherwise run two packages' test
# binaries at once on the 2 cores, each benchmark's figures taken under another's load.
# BENCH selects (BENCH=ManyClusters), BENCH_RUNS repeats each (as -count: one run each, where
# -benchtime 3x would run four); SCALE_CLUSTERS lists the cluster counts of BenchmarkManyClusters
# (SCALE_CLUSTERS=100,1000) and SCALE_WINDOW its idle window.
BENCH ?= .
BENCH_RUNS ?= 1
SCALE_CLUSTERS ?= 100
SCALE_WINDOW ?= 60s
bench: envtest-assets $(VERSITYGW) ## Benchmarks: backup throughput and memory, the continuous archive (segments, the archiver under a 3-member cluster's load, a point-in-time replay) against real etcd and S3 servers on loopback, the manager's memory among unrelated objects and with many clusters (envtest, scripted etcd members); figures for docs/performance.md.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" ETCD_BIN="$(ETCD_BIN)" VERSITYGW="$(VERSITYGW)" \
		SCALE_CLUSTERS="$(SCALE_CLUSTERS)" SCALE_WINDOW="$(SCALE_WINDOW)" \
		go test -p 1 -count=$(BENCH_RUNS) -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 90m . ./internal/...

.PHONY: test-all
# Mutation testing runs beside the cluster's start, the OLM checks and the operator's deployment
# for the e2e suite (whose test binary is compiled then too), which mostly wait on rollouts, and
# must pass before the e2e suite starts: its output is printed then, whole. (Beside
# the failpoint walk it saved ~3.5 min, but the walk failed there once, 2026-11-26: scale 5 to 3
# crossed memberRemoved once, not twice. A likely cause under the load, not confirmed: a
# removal's answer lost, and its retry finding the member gone, a path that crosses no failpoint.)
test-all: ## What CI runs: make test, then mutation testing beside scorecard and the operator's deployment on a freshly started local cluster, the e2e suite (OLM install and upgrade included), the failpoint walk and the short soak, the cluster always torn down after.
	$(MAKE) --no-print-directory test
	$(MAKE) --no-print-directory cluster-down PURGE=1
	status=0; mutation_log=$$(mktemp); \
	$(MAKE) --no-print-directory mutation >$$mutation_log 2>&1 & mutation=$$!; \
	{ $(MAKE) --no-print-directory olm-catalog && $(MAKE) --no-print-directory olm-scorecard && \
		$(MAKE) --no-print-directory cluster-deploy && go test -tags e2e -c -o /dev/null ./test/e2e/ && \
		{ wait $$mutation; mutated=$$?; echo "=== make mutation (run beside the cluster's start):"; cat $$mutation_log; [ $$mutated -eq 0 ]; } && \
		E2E_OLM=1 $(MAKE) --no-print-directory test-e2e && $(MAKE) --no-print-directory test-failpoints && \
		$(MAKE) --no-print-directory chaos-ci; } || status=$$?; \
		wait $$mutation 2>/dev/null; rm -f $$mutation_log; \
		$(MAKE) --no-print-directory cluster-down PURGE=1; exit $$status

##@ Build

.PHONY: build
build: ## Build the manager binary.
	CGO_ENABLED=0 go build -o $(LOCALBIN)/manager .

.PHONY: run
run: ## Run the manager against the cluster of the current kubeconfig.
	go run . --metrics-secure=false --metrics-bind-address=:8080

##@ Deployment

.PHONY: install
install: manifests $(KUSTOMIZE) $(KUBECTL) ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: manifests $(KUSTOMIZE) $(KUBECTL) ## Remove the CRDs (and with them every EtcdCluster, EtcdBackup, EtcdRestore).
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: deploy
deploy: manifests $(KUSTOMIZE) $(KUBECTL) ## Deploy the operator with kustomize, image $(IMG).
	rm -rf $(LOCALBIN)/deploy && mkdir -p $(LOCALBIN)/deploy && cp -r config $(LOCALBIN)/deploy/
	cd $(LOCALBIN)/deploy/config/manager && $(config_set_images)
	# Forced: where OLM installed the CRDs before, its field manager owns them; these are the same CRDs.
	$(KUSTOMIZE) build $(LOCALBIN)/deploy/config/default | $(KUBECTL) apply --server-side --force-conflicts -f -

.PHONY: undeploy
undeploy: $(KUSTOMIZE) $(KUBECTL) ## Remove the operator deployed by `make deploy`.
	$(KUSTOMIZE) build config/default | $(KUBECTL) delete --ignore-not-found -f -

##@ Tools (built from the Go module proxy into bin/, only when missing)

$(CONTROLLER_GEN):
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

$(KUSTOMIZE):
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

# Named with its version, so that a change of GOLANGCI_LINT_VERSION builds the new one.
$(GOLANGCI_LINT):
	@echo "building golangci-lint $(GOLANGCI_LINT_VERSION) from the Go module proxy (first time ~4 min)"
	GOBIN=$(LOCALBIN)/golangci-lint.tmp go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(LOCALBIN)/golangci-lint.tmp/golangci-lint $@ && rmdir $(LOCALBIN)/golangci-lint.tmp

# The Kubernetes commands come from one tools module (hack/tools/kube) so that they share a
# build; kube-apiserver alone is what envtest needs. The version is stamped as Kubernetes'
# own build does: without it they report v0.0.0 and version checks (OLM's minKubeVersion,
# kubectl version) fail.
kube_ldflags = $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,-X $(p).gitVersion=$(1) -X $(p).gitMajor=$(word 1,$(subst ., ,$(1:v%=%))) -X $(p).gitMinor=$(word 2,$(subst ., ,$(1))) -X $(p).gitTreeState=clean)
KUBE_LDFLAGS = $(call kube_ldflags,$(KUBERNETES_VERSION))
# Cold build times, measured in hack/cluster/TIMINGS.md.
K8S_BUILD_TIME_kube-apiserver = 4.5 min
K8S_BUILD_TIME_kube-controller-manager = 1 min
K8S_BUILD_TIME_kubectl = 30 s
# A line before each long build, so that a first run on a fresh machine is never silent for minutes.
building = @echo "==> building $(1) from source (Go module proxy)$(if $(2),; the first time takes about $(2))"

$(K8S_BIN)/%:
	$(call building,$* $(KUBERNETES_VERSION),$(or $(K8S_BUILD_TIME_$*),a minute))
	cd hack/tools/kube && go build -ldflags "$(KUBE_LDFLAGS)" -o $(K8S_BIN)/ k8s.io/kubernetes/cmd/$*

# The oldest Kubernetes the bundle installs on (the CSV's minKubeVersion), for test/minkube:
# kube-apiserver alone, from its own tools module, stamped as above. The stamp matters twice here:
# it is the version the test compares with minKubeVersion, and the API server derives from it
# which CEL libraries new CRDs may use.
$(K8S_MIN_BIN)/kube-apiserver:
	$(call building,kube-apiserver $(KUBERNETES_MIN_VERSION) (the oldest supported),4 min)
	cd hack/tools/kube-min && go build -ldflags "$(call kube_ldflags,$(KUBERNETES_MIN_VERSION))" -o $(K8S_MIN_BIN)/ k8s.io/kubernetes/cmd/kube-apiserver

$(ETCD_BIN)/etcd $(ETCD_NEXT_BIN)/etcd: $(LOCALBIN)/etcd/%/etcd:
	$(call building,etcd $*,40 s)
	cd hack/tools/etcd/$(basename $*) && CGO_ENABLED=0 go build -o $(LOCALBIN)/etcd/$*/ ./etcd go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3

# The S3-compatible server the storage tests (and the backup e2e) run against.
$(VERSITYGW): hack/tools/versitygw/go.mod
	$(call building,versitygw (the S3 server of the tests and the demo),2 min)
	cd hack/tools/versitygw && CGO_ENABLED=0 go build -o $@ github.com/versity/versitygw/cmd/versitygw

# promtool, for the alert rules' unit tests (make test-alerts).
$(PROMTOOL): hack/tools/promtool/go.mod
	$(call building,promtool (the alert rules' unit tests),15 min and 1.8 GB of modules)
	cd hack/tools/promtool && CGO_ENABLED=0 go build -o $@ github.com/prometheus/prometheus/cmd/promtool

.PHONY: envtest-assets
envtest-assets: $(K8S_BIN)/kube-apiserver $(K8S_BIN)/kubectl $(ETCD_BIN)/etcd ## Build envtest's kube-apiserver, etcd and kubectl (first time ~10 min).
	mkdir -p $(ENVTEST_ASSETS)
	ln -sf $(K8S_BIN)/kube-apiserver $(K8S_BIN)/kubectl $(ETCD_BIN)/etcd $(ENVTEST_ASSETS)/

.PHONY: envtest-min-assets
# kubectl is the current one (api/'s tests run `kubectl explain`): only kube-apiserver is judged.
envtest-min-assets: $(K8S_MIN_BIN)/kube-apiserver $(K8S_BIN)/kubectl $(ETCD_BIN)/etcd ## Build the oldest kube-apiserver the bundle installs on (pinned in hack/tools/kube-min) for test/minkube (first time ~4-7 min).
	mkdir -p $(ENVTEST_MIN_ASSETS)
	ln -sf $(K8S_MIN_BIN)/kube-apiserver $(K8S_BIN)/kubectl $(ETCD_BIN)/etcd $(ENVTEST_MIN_ASSETS)/


-include hack/cluster.mk
-include hack/multiarch.mk
-include hack/olm.mk
-include hack/olm-runtime.mk
-include hack/cert-manager.mk
-include hack/release.mk
-include hack/failpoints.mk
-include hack/mutation.mk
