# The local single-node Kubernetes cluster (hack/cluster/) and the end-to-end tests that run on
# it. Included by the Makefile, whose LOCALBIN, K8S_BIN, ETCD_BIN, ETCD_NEXT_BIN, REGISTRY and IMG
# it reuses, as it does its rules for the Kubernetes and etcd binaries and its build and deploy
# targets. Everything is built from the Go module proxy and Debian packages; nothing is pulled.

##@ Local cluster

CLUSTER_BIN ?= $(or $(LOCALBIN),$(CURDIR)/bin)
CLUSTER_K8S_BIN ?= $(or $(K8S_BIN),$(CLUSTER_BIN)/k8s)
# Data kept by cluster-down unless PURGE=1, and runtime state that cluster-down always removes.
CLUSTER_DIR ?= /var/lib/etcd-operator-cluster
CLUSTER_RUN_DIR ?= /run/etcd-operator-cluster
CLUSTER_KUBECONFIG ?= $(CLUSTER_DIR)/admin.kubeconfig
CLUSTER_KUBECTL ?= $(CLUSTER_K8S_BIN)/kubectl
# The second node's name (second-node-up), as hack/cluster/lib.sh has it.
CLUSTER_NODE2_NAME ?= local-node-2
# The cluster's own registry, on loopback. Its own images (pause, CoreDNS, OLM, test images) are
# named in it; the release's (REGISTRY: the operator, etcd, bundle, catalog) are pushed to it too,
# under their repository, and every node pulls them from it as a mirror of CLUSTER_MIRRORED_REGISTRY.
CLUSTER_REGISTRY ?= 127.0.0.1:5000
CLUSTER_MIRRORED_REGISTRY ?= $(or $(REGISTRY_HOST),$(CLUSTER_REGISTRY))
# How every image is pushed to the cluster's registry (imagebuilder push).
CLUSTER_PUSH = push -registry $(CLUSTER_REGISTRY) -mirror-of $(CLUSTER_MIRRORED_REGISTRY)
# The same registry over HTTPS (certificate from the cluster's CA), for operator-sdk run bundle.
CLUSTER_REGISTRY_TLS ?= 127.0.0.1:5443
CLUSTER_CA ?= $(CLUSTER_DIR)/pki/ca.crt
CLUSTER_IMAGES ?= $(CLUSTER_BIN)/images

# Versions come from the tools modules' go.mod, the one place they are pinned.
cluster_mod_version = $(shell awk '{ for (i = 1; i < NF; i++) if ($$i == "$(2)") { print $$(i+1); exit } }' $(1))
CLUSTER_COREDNS_VERSION := $(call cluster_mod_version,hack/tools/coredns/go.mod,github.com/coredns/coredns)
CLUSTER_LOCAL_PATH_VERSION := $(call cluster_mod_version,hack/tools/local-path-provisioner/go.mod,github.com/rancher/local-path-provisioner)
CLUSTER_CRICTL_VERSION := $(call cluster_mod_version,hack/tools/crictl/go.mod,sigs.k8s.io/cri-tools)
CLUSTER_VERSITYGW_VERSION := $(call cluster_mod_version,hack/tools/versitygw/go.mod,github.com/versity/versitygw)
CLUSTER_ETCD_VERSIONS ?= $(ETCD_VERSION) $(ETCD_NEXT_VERSION)
# The control plane's etcd is the operand's default version.
CLUSTER_ETCD_BIN ?= $(ETCD_BIN)/etcd

CLUSTER_COREDNS ?= $(CLUSTER_BIN)/coredns/$(CLUSTER_COREDNS_VERSION)/coredns
CLUSTER_LOCAL_PATH ?= $(CLUSTER_BIN)/local-path-provisioner/$(CLUSTER_LOCAL_PATH_VERSION)/local-path-provisioner
CLUSTER_CRICTL ?= $(CLUSTER_BIN)/crictl/$(CLUSTER_CRICTL_VERSION)/crictl
# Built by the Makefile's rule, the same binary the storage tests run on loopback.
CLUSTER_VERSITYGW ?= $(or $(VERSITYGW),$(CLUSTER_BIN)/versitygw)
CLUSTER_PAUSE ?= $(CLUSTER_BIN)/pause
CLUSTER_IMAGEBUILDER ?= $(CLUSTER_BIN)/imagebuilder
CLUSTER_K8S_TOOLS := $(addprefix $(CLUSTER_K8S_BIN)/,kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

CLUSTER_PAUSE_IMAGE ?= $(CLUSTER_REGISTRY)/pause:1.0
CLUSTER_COREDNS_IMAGE ?= $(CLUSTER_REGISTRY)/coredns:$(CLUSTER_COREDNS_VERSION)
CLUSTER_LOCAL_PATH_IMAGE ?= $(CLUSTER_REGISTRY)/local-path-provisioner:$(CLUSTER_LOCAL_PATH_VERSION)
# local-path-provisioner's helper pods run shell scripts (mkdir, rm) on the node's volume dirs.
CLUSTER_BUSYBOX_VERSION := 1.35
CLUSTER_BUSYBOX_IMAGE ?= $(CLUSTER_REGISTRY)/busybox:$(CLUSTER_BUSYBOX_VERSION)
CLUSTER_OPERATOR_IMAGE ?= $(or $(IMG),$(CLUSTER_REGISTRY)/etcd-operator:dev)
# The operand images: $(REGISTRY)/etcd:<version>, with etcd, etcdctl and etcdutl, as released.
CLUSTER_ETCD_IMAGE = $(or $(REGISTRY),$(CLUSTER_REGISTRY))/etcd:$(1)
# The S3-compatible server the backup and restore e2e tests run as a pod (test/e2e/s3server_test.go).
CLUSTER_VERSITYGW_IMAGE ?= $(CLUSTER_REGISTRY)/versitygw:$(CLUSTER_VERSITYGW_VERSION)

# An image's tarball is named after its name and tag: 127.0.0.1:5000/etcd:v3.6.16 -> etcd_v3.6.16.tar.
cluster_tar = $(CLUSTER_IMAGES)/$(subst :,_,$(notdir $(1))).tar
CLUSTER_BASE_TARS := $(foreach i,$(CLUSTER_PAUSE_IMAGE) $(CLUSTER_COREDNS_IMAGE) $(CLUSTER_LOCAL_PATH_IMAGE) $(CLUSTER_BUSYBOX_IMAGE),$(call cluster_tar,$(i)))
CLUSTER_ETCD_TARS := $(foreach v,$(CLUSTER_ETCD_VERSIONS),$(call cluster_tar,$(call CLUSTER_ETCD_IMAGE,$(v))))
CLUSTER_OPERATOR_TAR := $(call cluster_tar,$(CLUSTER_OPERATOR_IMAGE))
# Images only the e2e tests run.
CLUSTER_TEST_TARS := $(call cluster_tar,$(CLUSTER_VERSITYGW_IMAGE))

# Also the commands up.sh checks for (openssl, curl, envsubst, ss, ip, findmnt), usually present.
CLUSTER_DEBIAN_PACKAGES := containerd runc containernetworking-plugins iptables docker-registry busybox-static \
	openssl curl gettext-base iproute2 util-linux

# The scripts read their settings from the environment; their recipes are not echoed, as the
# scripts log what they do.
CLUSTER_ENV = CLUSTER_BIN=$(CLUSTER_BIN) CLUSTER_K8S_BIN=$(CLUSTER_K8S_BIN) CLUSTER_DIR=$(CLUSTER_DIR) \
	CLUSTER_RUN_DIR=$(CLUSTER_RUN_DIR) CLUSTER_REGISTRY=$(CLUSTER_REGISTRY) CLUSTER_REGISTRY_TLS=$(CLUSTER_REGISTRY_TLS) \
	CLUSTER_MIRRORED_REGISTRY=$(CLUSTER_MIRRORED_REGISTRY) \
	CLUSTER_IMAGEBUILDER=$(CLUSTER_IMAGEBUILDER) CLUSTER_CRICTL=$(CLUSTER_CRICTL) CLUSTER_ETCD_BIN=$(CLUSTER_ETCD_BIN) \
	CLUSTER_PAUSE_IMAGE=$(CLUSTER_PAUSE_IMAGE) CLUSTER_COREDNS_IMAGE=$(CLUSTER_COREDNS_IMAGE) \
	CLUSTER_LOCAL_PATH_IMAGE=$(CLUSTER_LOCAL_PATH_IMAGE) CLUSTER_BUSYBOX_IMAGE=$(CLUSTER_BUSYBOX_IMAGE) \
	CLUSTER_IMAGE_TARS="$(CLUSTER_BASE_TARS) $(CLUSTER_ETCD_TARS) $(CLUSTER_TEST_TARS)" CLUSTER_NODE2_NAME=$(CLUSTER_NODE2_NAME)

CLUSTER_TOOLS := $(CLUSTER_K8S_TOOLS) $(addsuffix /etcd,$(addprefix $(CLUSTER_BIN)/etcd/,$(CLUSTER_ETCD_VERSIONS))) \
	$(CLUSTER_COREDNS) $(CLUSTER_LOCAL_PATH) $(CLUSTER_CRICTL) $(CLUSTER_PAUSE) $(CLUSTER_IMAGEBUILDER)

.PHONY: cluster-tools
cluster-tools: cluster-packages $(CLUSTER_TOOLS) ## Install the cluster's Debian packages and build its binaries, each only if missing (first time ~13 min).

.PHONY: cluster-packages
cluster-packages: ## Install containerd, runc, CNI plugins, iptables, docker-registry and busybox-static from Debian, if missing.
	@installed=$$(dpkg-query -W -f '$${db:Status-Abbrev} $${Package}\n' $(CLUSTER_DEBIAN_PACKAGES) 2>/dev/null || true); \
	missing=$$(comm -13 <(awk '$$1 == "ii" { print $$2 }' <<<"$$installed" | sort) <(printf '%s\n' $(CLUSTER_DEBIAN_PACKAGES) | sort)); \
	if [ -n "$$missing" ]; then \
		echo "installing" $$missing; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

$(CLUSTER_COREDNS):
	$(call building,CoreDNS,3 min)
	cd hack/tools/coredns && CGO_ENABLED=0 go build -trimpath -o $@ github.com/coredns/coredns

$(CLUSTER_LOCAL_PATH):
	$(call building,local-path-provisioner,1.5 min)
	cd hack/tools/local-path-provisioner && CGO_ENABLED=0 go build -trimpath -o $@ github.com/rancher/local-path-provisioner

$(CLUSTER_CRICTL):
	$(call building,crictl,1 min)
	cd hack/tools/crictl && go build -trimpath -o $@ sigs.k8s.io/cri-tools/cmd/crictl

$(CLUSTER_PAUSE): hack/tools/pause/main.go
	cd hack/tools/pause && CGO_ENABLED=0 go build -trimpath -o $@ .

$(CLUSTER_IMAGEBUILDER): hack/tools/imagebuilder/main.go hack/tools/imagebuilder/go.mod
	cd hack/tools/imagebuilder && go build -trimpath -o $@ .

$(call cluster_tar,$(CLUSTER_PAUSE_IMAGE)): $(CLUSTER_PAUSE) $(CLUSTER_IMAGEBUILDER)
	$(CLUSTER_IMAGEBUILDER) build -tag $(CLUSTER_PAUSE_IMAGE) -o $@ -add $<:/pause -entrypoint /pause -user 65535:65535 \
		$(call image_labels,pause,The local cluster's pod sandbox: sleeps until SIGTERM (hack/tools/pause),1.0)

$(call cluster_tar,$(CLUSTER_COREDNS_IMAGE)): $(CLUSTER_COREDNS) $(CLUSTER_IMAGEBUILDER)
	$(CLUSTER_IMAGEBUILDER) build -tag $(CLUSTER_COREDNS_IMAGE) -o $@ -add $<:/coredns -entrypoint /coredns -user 65532:65532 \
		$(call image_labels,coredns,CoreDNS for the local cluster built from the Go module proxy,$(CLUSTER_COREDNS_VERSION))

$(call cluster_tar,$(CLUSTER_LOCAL_PATH_IMAGE)): $(CLUSTER_LOCAL_PATH) $(CLUSTER_IMAGEBUILDER)
	$(CLUSTER_IMAGEBUILDER) build -tag $(CLUSTER_LOCAL_PATH_IMAGE) -o $@ -add $<:/local-path-provisioner \
		-entrypoint /local-path-provisioner -user 65532:65532 \
		$(call image_labels,local-path-provisioner,Rancher's local-path-provisioner for the local cluster's volumes,$(CLUSTER_LOCAL_PATH_VERSION))

# imagebuilder arguments for Debian's busybox-static with every applet linked into /bin (expanded
# by the shell when the recipe runs, after cluster-packages installed it).
CLUSTER_BUSYBOX_FILES = -add /bin/busybox:/bin/busybox $$(/bin/busybox --list | grep -v -x busybox | sed 's|.*|-link /bin/&:busybox|')

# Runs as root: the helper pods create and remove volume directories owned by root on the node.
$(call cluster_tar,$(CLUSTER_BUSYBOX_IMAGE)): $(CLUSTER_IMAGEBUILDER) | cluster-packages
	$(CLUSTER_IMAGEBUILDER) build -tag $(CLUSTER_BUSYBOX_IMAGE) -o $@ $(CLUSTER_BUSYBOX_FILES) -cmd sh \
		$(call image_labels,busybox,Debian's busybox-static with every applet linked into /bin,$(CLUSTER_BUSYBOX_VERSION),GPL-2.0-only)

# Laid out as the upstream etcd images are (binaries in /usr/local/bin, etcd as the command), so
# that the operator's pod specs work with either.
$(CLUSTER_IMAGES)/etcd_%.tar: $(CLUSTER_BIN)/etcd/%/etcd $(CLUSTER_IMAGEBUILDER)
	$(CLUSTER_IMAGEBUILDER) build -tag $(call CLUSTER_ETCD_IMAGE,$*) -o $@ \
		$(foreach b,etcd etcdctl etcdutl,-add $(CLUSTER_BIN)/etcd/$*/$(b):/usr/local/bin/$(b)) \
		-cmd /usr/local/bin/etcd -user 65532:65532 \
		$(call image_labels,etcd,etcd with etcdctl and etcdutl built from the Go module proxy,$*)

# The server's arguments (credentials, port, the posix backend's directory) come from the pod spec.
$(call cluster_tar,$(CLUSTER_VERSITYGW_IMAGE)): $(CLUSTER_VERSITYGW) $(CLUSTER_IMAGEBUILDER)
	$(CLUSTER_IMAGEBUILDER) build -tag $(CLUSTER_VERSITYGW_IMAGE) -o $@ -add $<:/versitygw \
		-entrypoint /versitygw -user 65532:65532 \
		$(call image_labels,versitygw,The S3-compatible server the backup and restore e2e tests run,$(CLUSTER_VERSITYGW_VERSION))

.PHONY: cluster-operator-image
cluster-operator-image: build $(CLUSTER_IMAGEBUILDER) ## Build the operator's image IMG from bin/manager into bin/images/ (load it with make images).
	$(CLUSTER_IMAGEBUILDER) build -tag $(CLUSTER_OPERATOR_IMAGE) -o $(CLUSTER_OPERATOR_TAR) \
		-add $(CLUSTER_BIN)/manager:/manager -entrypoint /manager -user 65532:65532 \
		$(call image_labels,etcd-operator,$(OPERATOR_IMAGE_DESCRIPTION),$(VERSION))

.PHONY: images
images: $(CLUSTER_BASE_TARS) $(CLUSTER_ETCD_TARS) $(CLUSTER_TEST_TARS) cluster-operator-image ## Build every image and load it into the running cluster's containerd and registry.
	@$(CLUSTER_ENV) hack/cluster/load-images.sh $(CLUSTER_BASE_TARS) $(CLUSTER_ETCD_TARS) $(CLUSTER_TEST_TARS) $(CLUSTER_OPERATOR_TAR)

.PHONY: cluster-base-up
cluster-base-up: cluster-tools $(CLUSTER_BASE_TARS) $(CLUSTER_ETCD_TARS) $(CLUSTER_TEST_TARS) ## Start the local cluster without OLM (idempotent); prints the KUBECONFIG to use.
	@$(CLUSTER_ENV) hack/cluster/up.sh

.PHONY: cluster-down
cluster-down: ## Stop everything cluster-up started and clean up; PURGE=1 also deletes its data.
	@$(CLUSTER_ENV) PURGE=$(PURGE) hack/cluster/down.sh

.PHONY: second-node-up
second-node-up: cluster-up ## Start a second node on this machine (its own containerd and kubelet); only test-partition needs it.
	@$(CLUSTER_ENV) hack/cluster/second-node.sh up

.PHONY: second-node-down
second-node-down: ## Stop the second node and remove its pods and Node object (cluster-down does too).
	@$(CLUSTER_ENV) hack/cluster/second-node.sh down

.PHONY: cluster-status
cluster-status: ## Show which cluster processes run, and the nodes and pods.
	@$(CLUSTER_ENV) hack/cluster/status.sh

##@ End-to-end tests

# Where `make deploy` puts the operator (config/default).
CLUSTER_OPERATOR_NAMESPACE ?= etcd-operator-system
CLUSTER_OPERATOR_DEPLOYMENT ?= etcd-operator-controller-manager
# How many parallel e2e tests run at once (E2E_PARALLEL; test/e2e/parallel_test.go queues them,
# the longest expected first, and says why 4). go test's own -parallel is set high so that every
# parallel test reaches that queue.
CLUSTER_E2E_PARALLEL ?= 4
CLUSTER_E2E_GO_TEST_FLAGS ?= -count=1 -v -timeout 60m -parallel 64
# Files the tests keep for after the run, such as the visualization of a non-linearizable history
# (test/linearizability); CI systems that collect $ARTIFACTS set it.
ARTIFACTS ?= $(CLUSTER_BIN)/e2e-artifacts

# The image under test is tagged with its binary's hash, so a changed operator always rolls out
# and an unchanged one is not restarted. Expanded when test-e2e's recipe runs, after build.
CLUSTER_E2E_IMAGE = $(CLUSTER_REGISTRY)/etcd-operator:e2e-$(shell sha256sum $(CLUSTER_BIN)/manager | cut -c1-12)
CLUSTER_E2E_TAR := $(CLUSTER_IMAGES)/etcd-operator_e2e.tar

# The rollout is awaited here so that every test starts with the operator running.
.PHONY: cluster-deploy
cluster-deploy: cluster-up build $(CLUSTER_IMAGEBUILDER) ## Bring the cluster up if needed and deploy the operator image built from this tree.
	$(CLUSTER_IMAGEBUILDER) build -tag $(CLUSTER_E2E_IMAGE) -o $(CLUSTER_E2E_TAR) \
		-add $(CLUSTER_BIN)/manager:/manager -entrypoint /manager -user 65532:65532 \
		$(call image_labels,etcd-operator,$(OPERATOR_IMAGE_DESCRIPTION),$(VERSION))
	$(CLUSTER_ENV) hack/cluster/load-images.sh $(CLUSTER_E2E_TAR)
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(MAKE) --no-print-directory deploy IMG=$(CLUSTER_E2E_IMAGE)
	$(CLUSTER_KUBECTL) --kubeconfig $(CLUSTER_KUBECONFIG) -n $(CLUSTER_OPERATOR_NAMESPACE) \
		rollout status deployment/$(CLUSTER_OPERATOR_DEPLOYMENT) --timeout=3m

.PHONY: test-e2e
# What the e2e suite needs to know of the cluster and of this tree's images and tools.
CLUSTER_E2E_ENV = KUBECONFIG=$(CLUSTER_KUBECONFIG) E2E_PARALLEL=$(CLUSTER_E2E_PARALLEL) E2E_OPERATOR_IMAGE=$(CLUSTER_E2E_IMAGE) E2E_OPERATOR_NAMESPACE=$(CLUSTER_OPERATOR_NAMESPACE) \
	E2E_OPERATOR_DEPLOYMENT=$(CLUSTER_OPERATOR_DEPLOYMENT) E2E_S3_IMAGE=$(CLUSTER_VERSITYGW_IMAGE) E2E_BUSYBOX_IMAGE=$(CLUSTER_BUSYBOX_IMAGE) \
	E2E_ETCDUTL=$(ETCD_BIN)/etcdutl E2E_KUBECTL=$(CLUSTER_KUBECTL) ARTIFACTS=$(ARTIFACTS) \
	E2E_OPERATOR_SDK=$(OPERATOR_SDK) E2E_REGISTRY_CA=$(CLUSTER_CA) \
	E2E_OLM_BUNDLE_REPOSITORY=$(patsubst $(CLUSTER_MIRRORED_REGISTRY)/%,$(CLUSTER_REGISTRY_TLS)/%,$(REGISTRY))/etcd-operator-bundle \
	E2E_ETCD_REPOSITORY=$(or $(REGISTRY),$(CLUSTER_REGISTRY))/etcd \
	E2E_OLM_NEXT_BUNDLE_IMAGE=$(subst $(CLUSTER_REGISTRY)/,$(CLUSTER_REGISTRY_TLS)/,$(OLM_RUNTIME_NEXT_BUNDLE_IMAGE)) \
	E2E_OLM_INDEX_IMAGE=$(subst $(CLUSTER_REGISTRY)/,$(CLUSTER_REGISTRY_TLS)/,$(OLM_RUNTIME_INDEX_IMAGE))

# The cells of the day-two matrix test-e2e runs beside the rest: covering (every operation on
# every value of every option, as CI runs it), or none with E2E_MATRIX= .
E2E_MATRIX ?= covering
test-e2e: cluster-deploy ## Bring the cluster up if needed, deploy the operator image built from this tree and run test/e2e, with the day-two matrix's covering cells (E2E_MATRIX= leaves them out).
	$(CLUSTER_E2E_ENV) E2E_MATRIX=$(E2E_MATRIX) go test -tags e2e $(CLUSTER_E2E_GO_TEST_FLAGS) ./test/e2e/...

.PHONY: test-guide
test-guide: cluster-deploy ## Not in CI: run the README's and docs/guide's pages as written (shell blocks, YAML applied; kubectl, etcdctl, openssl and curl on the PATH), each in a namespace e2e-guide-<page> deleted after; GUIDE_PAGES=<regexp> picks pages.
	KUBECONFIG=$(CLUSTER_KUBECONFIG) PATH="$(dir $(CLUSTER_KUBECTL)):$(ETCD_BIN):$$PATH" GUIDE_PAGES='$(GUIDE_PAGES)' \
		go test -tags e2e -count=1 -v -timeout 60m -run '^TestGuidePagesRun$$' ./test/guide/

.PHONY: openshift-up openshift-down test-openshift
openshift-up: cluster-up ## OpenShift's rules on the local cluster: the restricted-v2 constraint as admission policies on every namespace given ID ranges (all but the platform's), its API groups (security.openshift.io, config.openshift.io, etcds.operator.openshift.io) and openshift-operators for all namespaces.
	$(CLUSTER_ENV) hack/cluster/openshift.sh up

openshift-down: ## Remove what openshift-up added (openshift-operators and what runs there included).
	$(CLUSTER_ENV) hack/cluster/openshift.sh down

# The guide's operator (make deploy's, in its own namespace) and then the demo's (OLM's, for all
# namespaces) meet restricted-v2 in turn; the demo's is uninstalled after, so that the next
# suite's operator is the only one acting, and the rules are taken down (the other suites' own
# test pods bring fixed IDs).
test-openshift: openshift-up ## Not in CI: on OpenShift's rules (openshift-up), the README's and guide's pages (test-guide), then the demo installing through OLM into openshift-operators, with a TLS and authentication cluster, a verified snapshot and an in-place restore (DEMO_SECURE=1).
	$(MAKE) --no-print-directory test-guide
	$(MAKE) --no-print-directory demo OPENSHIFT=1 DEMO_SECURE=1
	$(CLUSTER_KUBECTL) --kubeconfig $(CLUSTER_KUBECONFIG) delete namespace $(CLUSTER_DEMO_NAMESPACE) --wait --timeout=5m
	$(CLUSTER_KUBECTL) --kubeconfig $(CLUSTER_KUBECONFIG) -n openshift-operators delete subscription,csv --all --wait --timeout=5m
	$(CLUSTER_ENV) hack/cluster/openshift.sh down

.PHONY: test-partition
# The last test needs a second node, up only while it runs: the first two stop or cut off the
# first node's members, and must find none of theirs on another node.
test-partition: cluster-deploy ## Not in CI: the split-brain tests, members cut off by iptables (one while the kubelet is stopped with SIGSTOP, so they run alone), the fence of members declared lost, and a lost node's members coming back after the force (on a second node).
	$(CLUSTER_ENV) hack/cluster/second-node.sh down
	$(CLUSTER_E2E_ENV) E2E_PARTITION=1 go test -tags e2e $(CLUSTER_E2E_GO_TEST_FLAGS) -run '^(TestQuorumLossBehindAPartition|TestDeclaredLostMembersAreFencedFromClients)$$' ./test/e2e/
	$(CLUSTER_ENV) hack/cluster/second-node.sh up
	$(CLUSTER_E2E_ENV) E2E_PARTITION=1 E2E_SECOND_NODE=$(CLUSTER_NODE2_NAME) go test -tags e2e $(CLUSTER_E2E_GO_TEST_FLAGS) -run '^(TestALostNodesMembersComeBackAfterTheForce|TestALostNodesMembersStayDownWhileTheSurvivorRestarts)$$' ./test/e2e/; \
		status=$$?; $(CLUSTER_ENV) hack/cluster/second-node.sh down; exit $$status

.PHONY: test-matrix
# MATRIX: covering (every operation on every value of every option), pairs (every pair of
# option values, each cluster through every operation that applies to it) or full (the product).
MATRIX ?= pairs
MATRIX_PARALLEL ?= 3
test-matrix: cluster-deploy ## Not in CI: the day-two matrix (test/matrix): with MATRIX=pairs (the default) every pair of option values, each cluster taken through every operation that applies to it; MATRIX_CELLS=<regexp> picks cells.
	$(CLUSTER_E2E_ENV) E2E_PARALLEL=$(MATRIX_PARALLEL) E2E_MATRIX=$(MATRIX) E2E_MATRIX_CELLS='$(MATRIX_CELLS)' go test -tags e2e -count=1 -v -timeout 240m -parallel 64 \
		-run '^TestMatrix$$' ./test/e2e/

.PHONY: test-e2e-extended
test-e2e-extended: cluster-deploy ## Not in CI: the e2e cases that take a path a CI case takes too (the plain forced recovery of 3 and of 5 members; the recovery by annotation and from the latest backup, which the matrix's covering cells take on several kinds of cluster), ~6 min.
	$(CLUSTER_E2E_ENV) E2E_EXTENDED=1 go test -tags e2e $(CLUSTER_E2E_GO_TEST_FLAGS) \
		-run '^TestQuorumLostForGoodIsRecovered$$/^(([35]_members_lose_[23],_policy_ForceNewCluster)|(3_members_lose_2,_policy_Manual,_then_the_annotation)|(3_members_lose_all_3,_policy_FromLatestBackup))$$' ./test/e2e/

.PHONY: test-corruption
test-corruption: cluster-deploy ## Not in CI but its first case: corrupt members caught and replaced (a value altered on a stopped member's disk, caught by its start-up check; two of five members diverged past the others' compaction, named by etcd's compaction hash check or the operator's comparison).
	$(CLUSTER_E2E_ENV) E2E_EXTENDED=1 go test -tags e2e $(CLUSTER_E2E_GO_TEST_FLAGS) \
		-run '^(TestACorruptedMemberIsCaughtAndReplaced|TestDivergedMembersAreNamedAndReplaced)$$' ./test/e2e/

.PHONY: test-pitr
test-pitr: cluster-deploy ## Point-in-time recovery, the long variant (CI runs the short one): thousands of keys under puts, deletes, transactions and leases for minutes, four points restored and compared key by key with the source, and a gap reported, refused and closed.
	$(CLUSTER_E2E_ENV) E2E_PITR_LONG=1 go test -tags e2e $(CLUSTER_E2E_GO_TEST_FLAGS) \
		-run '^TestPointInTimeRecovery$$' ./test/e2e/

.PHONY: test-restore-informer
test-restore-informer: cluster-deploy envtest-assets ## Not in CI: a kube-apiserver started on this machine keeps its data in a cluster restored in place twice; its client-go informer lists afresh and converges with the revision bump, and is shown stuck without it.
	$(CLUSTER_E2E_ENV) E2E_RESTORE_INFORMER=1 KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) go test -tags e2e $(CLUSTER_E2E_GO_TEST_FLAGS) \
		-run '^TestAKubeAPIServerSurvivesAnInPlaceRestore$$' ./test/e2e/

# A real Prometheus on the cluster (test/prometheus) with the shipped monitors' scrape
# configuration and alert rules, built at promtool's version so that both share one module cache
# (and, built with the same flags, one build cache).
CLUSTER_PROMETHEUS_VERSION := $(call cluster_mod_version,hack/tools/prometheus/go.mod,github.com/prometheus/prometheus)
ifneq ($(CLUSTER_PROMETHEUS_VERSION),$(call cluster_mod_version,hack/tools/promtool/go.mod,github.com/prometheus/prometheus))
$(error hack/tools/prometheus and hack/tools/promtool must require the same github.com/prometheus/prometheus)
endif
CLUSTER_PROMETHEUS ?= $(CLUSTER_BIN)/prometheus/$(CLUSTER_PROMETHEUS_VERSION)/prometheus
CLUSTER_PROMETHEUS_IMAGE ?= $(CLUSTER_REGISTRY)/prometheus:$(CLUSTER_PROMETHEUS_VERSION)

$(CLUSTER_PROMETHEUS): hack/tools/prometheus/go.mod
	$(call building,Prometheus (make test-monitoring),15-30 min and 1.9 GB of modules; about a minute once promtool is built)
	cd hack/tools/prometheus && CGO_ENABLED=0 go build -o $@ github.com/prometheus/prometheus/cmd/prometheus

$(call cluster_tar,$(CLUSTER_PROMETHEUS_IMAGE)): $(CLUSTER_PROMETHEUS) $(CLUSTER_IMAGEBUILDER)
	$(CLUSTER_IMAGEBUILDER) build -tag $(CLUSTER_PROMETHEUS_IMAGE) -o $@ -add $<:/bin/prometheus \
		-entrypoint /bin/prometheus -user 65532:65532 \
		$(call image_labels,prometheus,Prometheus built from the Go module proxy for make test-monitoring,$(CLUSTER_PROMETHEUS_VERSION))

# Applied from a copy of test/prometheus that also holds the rule file hack/alertrules writes from
# config/prometheus/prometheusrule.yaml; the ConfigMaps' hashed names roll Prometheus when either
# file changed.
.PHONY: prometheus-deploy
prometheus-deploy: $(call cluster_tar,$(CLUSTER_PROMETHEUS_IMAGE)) $(KUSTOMIZE) $(CLUSTER_KUBECTL) ## Run Prometheus on the local cluster (namespace prometheus), scraping the operator and every member with the shipped rules (make prometheus-undeploy removes it).
	$(CLUSTER_ENV) hack/cluster/load-images.sh $(call cluster_tar,$(CLUSTER_PROMETHEUS_IMAGE))
	dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && cp test/prometheus/* "$$dir/" && \
		go run ./hack/alertrules config/prometheus/prometheusrule.yaml > "$$dir/rules.yaml" && \
		(cd "$$dir" && $(KUSTOMIZE) edit set image prometheus=$(CLUSTER_PROMETHEUS_IMAGE)) && \
		$(KUSTOMIZE) build "$$dir" | $(CLUSTER_KUBECTL) --kubeconfig $(CLUSTER_KUBECONFIG) apply -f -
	$(CLUSTER_KUBECTL) --kubeconfig $(CLUSTER_KUBECONFIG) -n prometheus rollout status deployment/prometheus --timeout=3m

.PHONY: prometheus-undeploy
prometheus-undeploy: $(CLUSTER_KUBECTL) ## Remove what prometheus-deploy made.
	$(CLUSTER_KUBECTL) --kubeconfig $(CLUSTER_KUBECONFIG) delete --ignore-not-found -f test/prometheus/prometheus.yaml

# E2E_MONITORING_MEMBERS_DOWN_FIRES=1 keeps the member down until etcdMembersDown fires too,
# past its 20-minute for: (~25 min).
.PHONY: test-monitoring
test-monitoring: cluster-deploy prometheus-deploy ## Not in CI (Prometheus's first build is 15-30 min): a real Prometheus scrapes the operator and a 3-member cluster; a member kept down fires the quorum alert, which resolves once it is back; a failing scheduled backup fires the backup alerts; every query of the Grafana dashboard answers data (~8 + ~4 min after the build).
	$(CLUSTER_E2E_ENV) E2E_PROMETHEUS_NAMESPACE=prometheus go test -tags e2e $(CLUSTER_E2E_GO_TEST_FLAGS) -run '^(TestAlertsOnARealPrometheus|TestDashboardOnARealPrometheus)$$' ./test/e2e/

# The soak. DURATION of fault injection (a Go duration), then the checks; CHAOS_SEED replays a
# run's choice of faults; CHAOS_TIMEOUT must exceed DURATION by the clusters' last settle.
DURATION ?= 30m
CHAOS_CI_DURATION ?= 5m
CHAOS_SEED ?=
CHAOS_TIMEOUT ?= 2h

.PHONY: test-olm-run-bundle
test-olm-run-bundle: olm-catalog $(OPERATOR_SDK) ## Not in CI: operator-sdk run bundle installs this tree's bundle, upgrades it to the next one and cleans up (~2 min after olm-catalog).
	E2E_OLM=1 E2E_OLM_RUN_BUNDLE=1 $(MAKE) --no-print-directory test-e2e \
		CLUSTER_E2E_GO_TEST_FLAGS='-count=1 -v -timeout 20m -run ^TestOperatorSDKRunBundleUpgradeAndCleanup$$$$'

.PHONY: chaos
chaos: cluster-deploy ## Soak: two clusters under writers, linearizability clients and scheduled backups while members, volumes and the operator are killed and clusters scaled and upgraded, for DURATION (default 30m).
	$(CLUSTER_E2E_ENV) E2E_CHAOS_DURATION=$(DURATION) E2E_CHAOS_SEED=$(CHAOS_SEED) \
		go test -tags e2e -count=1 -v -timeout $(CHAOS_TIMEOUT) -run '^TestChaos$$' ./test/e2e/

.PHONY: chaos-ci
chaos-ci: ## The soak as CI runs it: make chaos for CHAOS_CI_DURATION (default 5m).
	$(MAKE) --no-print-directory chaos DURATION=$(CHAOS_CI_DURATION) CHAOS_TIMEOUT=30m

# Benchmarks, not tests: figures for docs/performance.md. BENCH selects, BENCH_COUNT repeats.
BENCH ?= .
BENCH_COUNT ?= 3x

.PHONY: bench-e2e
bench-e2e: cluster-deploy ## Benchmarks against a plain StatefulSet on the local cluster (time to Available, member recovery, idle writes, quorum-loss recovery).
	KUBECONFIG=$(CLUSTER_KUBECONFIG) go test -tags e2e -run '^$$' -bench '$(BENCH)' -benchtime $(BENCH_COUNT) -timeout 60m ./test/e2e/

CLUSTER_DEMO_NAMESPACE ?= demo

# Said before anything is built: on a fresh machine the first run builds Kubernetes, etcd, OLM
# and the operator from source, and a silent terminal for that long looks like a hang.
.PHONY: demo-intro
demo-intro:
	@echo "make demo: the local cluster, OLM and this tree's catalog, then the operator installed through"
	@echo "a Subscription, a 3-member EtcdCluster and a scheduled backup to an S3 server in the cluster."
	@echo "On a fresh machine the first run builds everything from source, about 20-30 minutes on 2 cores"
	@echo "(Kubernetes and the cluster's tools ~13 min measured, then etcd, OLM, opm, the S3 server and the"
	@echo "operator). Later runs take a few minutes. Each long build says what it builds as it starts."

# With OPENSHIFT=1 the operator goes into openshift-operators for all namespaces, as OperatorHub
# installs it, on the cluster with OpenShift's rules (openshift-up). DEMO_SECURE=1 adds a cluster
# with TLS and authentication, a verified snapshot of it and an in-place restore.
DEMO_OPERATOR_NAMESPACE = $(if $(OPENSHIFT),openshift-operators,$(CLUSTER_DEMO_NAMESPACE))

.PHONY: demo
demo: demo-intro olm-catalog-head $(if $(OPENSHIFT),openshift-up) ## The main job on a fresh machine: the local cluster with OLM, the operator installed from this tree's catalog by a Subscription, a 3-member EtcdCluster, a scheduled backup. OPENSHIFT=1: on OpenShift's rules, into openshift-operators.
	KUBECTL=$(CLUSTER_KUBECTL) ETCDCTL=$(ETCD_BIN)/etcdctl KUBECONFIG=$(CLUSTER_KUBECONFIG) DEMO_NAMESPACE=$(CLUSTER_DEMO_NAMESPACE) \
		OPERATOR_NAMESPACE=$(DEMO_OPERATOR_NAMESPACE) DEMO_SECURE=$(DEMO_SECURE) \
		VERSITYGW_IMAGE=$(CLUSTER_VERSITYGW_IMAGE) DEPLOYED_NAMESPACE=$(CLUSTER_OPERATOR_NAMESPACE) \
		DEPLOYED_DEPLOYMENT=$(CLUSTER_OPERATOR_DEPLOYMENT) hack/demo/demo.sh
