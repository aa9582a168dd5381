# Multi-architecture images for release: the operator's and etcd's (the bundle's relatedImages,
# and the etcd version the operator upgrades to), each an OCI image index of one image per
# platform in IMAGE_PLATFORMS, from binaries cross-compiled with CGO_ENABLED=0. Included by the
# Makefile after hack/cluster.mk, whose imagebuilder rule and etcd image names it reuses.
#
# The local cluster (amd64) keeps its single-architecture images (make images), and CI builds
# none of these: test/olm checks that the CSV's architecture labels name these platforms, and
# imagebuilder's tests build an index for both from a tiny cross-compiled program.

##@ Multi-architecture images

# The CSV's operatorframework.io/arch.* and os.* labels name exactly these (test/olm checks).
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
MULTIARCH_IMAGES ?= $(LOCALBIN)/images/multiarch
MULTIARCH_ETCD_VERSIONS ?= $(ETCD_VERSION) $(ETCD_NEXT_VERSION)
MULTIARCH_OPERATOR_TAR = $(MULTIARCH_IMAGES)/$(subst :,_,$(notdir $(IMG))).tar
multiarch_etcd_tar = $(MULTIARCH_IMAGES)/etcd_$(1).tar
MULTIARCH_TARS = $(MULTIARCH_OPERATOR_TAR) $(foreach v,$(MULTIARCH_ETCD_VERSIONS),$(call multiarch_etcd_tar,$(v)))
MULTIARCH_PLATFORM_FLAGS = $(foreach p,$(IMAGE_PLATFORMS),-platform $(p))
# Each platform's binaries are under bin/<os>_<arch>/, which imagebuilder's {os}_{arch} names.
multiarch_bin = $(LOCALBIN)/$(subst /,_,$(1))
platform_os = $(word 1,$(subst /, ,$(1)))
platform_arch = $(word 2,$(subst /, ,$(1)))

# Built as `make build` builds bin/manager; Go's build cache makes the host's platform a link only.
.PHONY: multiarch-build
multiarch-build: ## Cross-compile the manager for every IMAGE_PLATFORMS into bin/<os>_<arch>/manager.
	$(foreach p,$(IMAGE_PLATFORMS),CGO_ENABLED=0 GOOS=$(call platform_os,$(p)) GOARCH=$(call platform_arch,$(p)) go build -o $(call multiarch_bin,$(p))/manager .$(multiarch_newline))

define multiarch_newline


endef

# bin/<os>_<arch>/etcd/<version>/{etcd,etcdctl,etcdutl}, built as the host's are, only if missing.
define multiarch_etcd_rule
$(call multiarch_bin,$(1))/etcd/$(2)/etcd:
	cd hack/tools/etcd/$(basename $(2)) && CGO_ENABLED=0 GOOS=$(call platform_os,$(1)) GOARCH=$(call platform_arch,$(1)) go build \
		-o $$(@D)/ ./etcd go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3
endef
$(foreach p,$(IMAGE_PLATFORMS),$(foreach v,$(MULTIARCH_ETCD_VERSIONS),$(eval $(call multiarch_etcd_rule,$(p),$(v)))))

# Built every time (a few seconds each), so that the tags follow REGISTRY and IMG. The etcd
# images are laid out as the local cluster's are (hack/cluster.mk).
.PHONY: images-multiarch
images-multiarch: multiarch-build $(CLUSTER_IMAGEBUILDER) $(foreach p,$(IMAGE_PLATFORMS),$(foreach v,$(MULTIARCH_ETCD_VERSIONS),$(call multiarch_bin,$(p))/etcd/$(v)/etcd)) ## Build the operator (IMG) and etcd images for every IMAGE_PLATFORMS, one OCI image index each, into bin/images/multiarch/.
	$(CLUSTER_IMAGEBUILDER) build -tag $(IMG) -o $(MULTIARCH_OPERATOR_TAR) $(MULTIARCH_PLATFORM_FLAGS) \
		-add '$(LOCALBIN)/{os}_{arch}/manager:/manager' -entrypoint /manager -user 65532:65532 \
		$(call image_labels,etcd-operator,$(OPERATOR_IMAGE_DESCRIPTION),$(VERSION))
	$(foreach v,$(MULTIARCH_ETCD_VERSIONS),$(CLUSTER_IMAGEBUILDER) build -tag $(call CLUSTER_ETCD_IMAGE,$(v)) \
		-o $(call multiarch_etcd_tar,$(v)) $(MULTIARCH_PLATFORM_FLAGS) \
		$(foreach b,etcd etcdctl etcdutl,-add '$(LOCALBIN)/{os}_{arch}/etcd/$(v)/$(b):/usr/local/bin/$(b)') \
		-cmd /usr/local/bin/etcd -user 65532:65532 \
		$(call image_labels,etcd,etcd with etcdctl and etcdutl built from the Go module proxy,$(v))$(multiarch_newline))

.PHONY: images-multiarch-push
images-multiarch-push: $(CLUSTER_IMAGEBUILDER) ## Push images-multiarch's image indexes to PUSH_REGISTRY (REGISTRY's, or the local cluster's for the default).
	$(CLUSTER_IMAGEBUILDER) $(IMAGE_PUSH) $(MULTIARCH_TARS)
