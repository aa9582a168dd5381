# The failpoint build and the failpoint walk (docs/reliability.md). Included by the Makefile,
# whose LOCALBIN and deploy target it uses, after hack/cluster.mk, whose cluster, image and e2e
# settings it reuses.
#
# The operator's failpoints are `// gofail: var` comments: the normal build compiles none of
# them. The failpoint build copies the tree into bin/, turns the comments into code there with
# gofail and links gofail's runtime; the tracked tree is never rewritten.

##@ Failpoints

GOFAIL ?= $(LOCALBIN)/gofail
GOFAIL_VERSION := $(call cluster_mod_version,hack/tools/gofail/go.mod,go.etcd.io/gofail)
FAILPOINT_SRC ?= $(LOCALBIN)/failpoint-src
FAILPOINT_MANAGER ?= $(LOCALBIN)/manager-failpoints
# Tagged apart from every other operator image, with its binary's hash.
FAILPOINT_IMAGE = $(CLUSTER_REGISTRY)/etcd-operator:failpoints-$(shell sha256sum $(FAILPOINT_MANAGER) | cut -c1-12)
FAILPOINT_TAR := $(CLUSTER_IMAGES)/etcd-operator_failpoints.tar
FAILPOINT_GO_TEST_FLAGS ?= -count=1 -v -timeout 45m
# The walk's operations to run (test/failpoints), a regexp; empty runs them all.
FAILPOINT_OPERATIONS ?=

$(GOFAIL): hack/tools/gofail/go.mod
	cd hack/tools/gofail && go build -trimpath -o $@ go.etcd.io/gofail

# The copy holds what git would commit (tracked and new files, not ignored ones such as bin/).
# gofail names each binding file's package after its directory, which for main.go is the
# copy's; the runtime's go.sum lines come from the tools module that pins gofail.
.PHONY: failpoint-build
failpoint-build: $(GOFAIL) ## Build bin/manager-failpoints, the manager with its failpoints as code, from a copy of the tree in bin/.
	rm -rf $(FAILPOINT_SRC) && mkdir -p $(FAILPOINT_SRC)
	git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -c | tar -x -C $(FAILPOINT_SRC)
	cd $(FAILPOINT_SRC) && $(GOFAIL) enable $$(grep -rlE --include='*.go' '^\s*// gofail: var ' . | xargs -n1 dirname | sort -u)
	sed -i 's/^package .*/package main/' $(FAILPOINT_SRC)/main.fail.go
	cd $(FAILPOINT_SRC) && go mod edit -require=go.etcd.io/gofail@$(GOFAIL_VERSION) && \
		grep '^go.etcd.io/gofail $(GOFAIL_VERSION)[ /]' $(CURDIR)/hack/tools/gofail/go.sum >>go.sum && \
		CGO_ENABLED=0 go build -o $(FAILPOINT_MANAGER) .

.PHONY: failpoint-image
failpoint-image: failpoint-build $(CLUSTER_IMAGEBUILDER) ## Build the failpoint build's image (tag etcd-operator:failpoints-<hash>) into bin/images/.
	$(CLUSTER_IMAGEBUILDER) build -tag $(FAILPOINT_IMAGE) -o $(FAILPOINT_TAR) \
		-add $(FAILPOINT_MANAGER):/manager -entrypoint /manager -user 65532:65532 \
		$(call image_labels,etcd-operator,etcd Operator built with its gofail failpoints enabled for the failpoint walk,$(VERSION))

# The walk redeploys the operator Deployment with the failpoint image (make deploy) and sets its
# gofail environment itself; `make cluster-deploy` puts the normal build back.
.PHONY: test-failpoints
test-failpoints: cluster-up failpoint-image ## The failpoint walk: crash the operator at every failpoint of a cluster's life, check it converges (FAILPOINT_OPERATIONS selects).
	$(CLUSTER_ENV) hack/cluster/load-images.sh $(FAILPOINT_TAR)
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(MAKE) --no-print-directory deploy IMG=$(FAILPOINT_IMAGE)
	$(CLUSTER_KUBECTL) --kubeconfig $(CLUSTER_KUBECONFIG) -n $(CLUSTER_OPERATOR_NAMESPACE) \
		rollout status deployment/$(CLUSTER_OPERATOR_DEPLOYMENT) --timeout=3m
	KUBECONFIG=$(CLUSTER_KUBECONFIG) E2E_FAILPOINTS=1 E2E_FAILPOINT_OPERATIONS='$(FAILPOINT_OPERATIONS)' \
		E2E_OPERATOR_IMAGE=$(FAILPOINT_IMAGE) E2E_OPERATOR_NAMESPACE=$(CLUSTER_OPERATOR_NAMESPACE) \
		E2E_OPERATOR_DEPLOYMENT=$(CLUSTER_OPERATOR_DEPLOYMENT) E2E_S3_IMAGE=$(CLUSTER_VERSITYGW_IMAGE) \
		E2E_BUSYBOX_IMAGE=$(CLUSTER_BUSYBOX_IMAGE) E2E_ETCDUTL=$(ETCD_BIN)/etcdutl E2E_KUBECTL=$(CLUSTER_KUBECTL) \
		go test -tags e2e $(FAILPOINT_GO_TEST_FLAGS) -run '^TestFailpointWalk$$' ./test/e2e/
