# A release of VERSION: every image its bundle and catalog name, each pinned by digest, written to
# RELEASE_DIR ready to push to REGISTRY (make release-publish builds and pushes it). Included by
# the Makefile after hack/multiarch.mk and hack/olm.mk, whose targets it runs in a copy of this
# tree, so that bundle/ and catalog/ stay the committed, tag-named ones (the copy's catalog names
# REGISTRY where the committed one names PUBLIC_REGISTRY). docs/olm.md says how a release is
# published and mirrored.
#
# RELEASE_DIR/images/ holds every image as an OCI image layout tarball: the operator and etcd
# (every etcd version the operator runs) as one image index each, one image per IMAGE_PLATFORMS;
# the bundle and catalog images, and the operator and bundle images of the earlier releases the
# catalog serves (release-images), as one image each (built as image tarballs, then written as
# layouts by imagebuilder layout, which keeps their digests). RELEASE_DIR/bundle and
# RELEASE_DIR/catalog are what those images hold; images.txt lists each image by tag and digest.

##@ Release

RELEASE_DIR ?= $(LOCALBIN)/release/v$(VERSION)
RELEASE_IMAGES = $(RELEASE_DIR)/images
RELEASE_CATALOG_SOURCE ?= etcd-operator-release
# What the copy of the tree is made with: this tree's tools and commit (the copy has no .git).
RELEASE_WORK_VARS = OLM_IMAGES=$(RELEASE_IMAGES) LOCALBIN=$(LOCALBIN) IMAGE_REVISION=$(IMAGE_REVISION)

.PHONY: release
release: images-multiarch $(OLM_IMAGEBUILDER) $(OPM) ## Build release VERSION into RELEASE_DIR: its images, and a bundle and catalog naming each by digest (~3 min the first time, cross-compiling for arm64; 20 s after).
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_IMAGES)
	cp $(MULTIARCH_TARS) $(RELEASE_IMAGES)/
	$(MAKE) --no-print-directory release-images OLM_IMAGES=$(RELEASE_IMAGES) RELEASE_PIN=1
	work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && \
	tar -c --exclude=./bin --exclude=./.git . | tar -x -C "$$work" && \
	$(olm_to_registry) -i "$$work/$(CATALOG_TEMPLATE)" "$$work"/$(CATALOG_DIR)/bundles/*.yaml && \
	$(MAKE) -C "$$work" --no-print-directory bundle bundle-build USE_IMAGE_DIGESTS=1 $(RELEASE_WORK_VARS) && \
	$(MAKE) -C "$$work" --no-print-directory catalog $(RELEASE_WORK_VARS) && \
	$(OLM_IMAGEBUILDER) pin -images $(RELEASE_IMAGES) -registry $(REGISTRY) "$$work"/$(CATALOG_DIR)/bundles/*.yaml && \
	$(OPM) validate "$$work/catalog" && \
	$(MAKE) -C "$$work" --no-print-directory catalog-build $(RELEASE_WORK_VARS) && \
	cp -r "$$work/bundle" "$$work/bundle.Dockerfile" "$$work/catalog" "$$work/catalog.Dockerfile" $(RELEASE_DIR)/
	cd $(RELEASE_IMAGES) && for tar in *.tar; do \
		case " $(notdir $(MULTIARCH_TARS)) " in *" $$tar "*) continue;; esac; \
		$(OLM_IMAGEBUILDER) layout -o "$$tar.oci" "$$tar" && mv "$$tar.oci" "$$tar" || exit 1; \
	done
	for tar in $(RELEASE_IMAGES)/*.tar; do \
		tag=$$($(OLM_IMAGEBUILDER) tag "$$tar") && echo "$$tag $$($(OLM_IMAGEBUILDER) digest -tag "$$tag" "$$tar")" || exit 1; \
	done > $(RELEASE_DIR)/images.txt
	@echo "release v$(VERSION) in $(RELEASE_DIR):" && cat $(RELEASE_DIR)/images.txt

# What a person runs to publish a release to their registry: make release-publish
# REGISTRY=<host>/<organisation> [VERSION=x.y.z]. Every image of RELEASE_DIR/images goes to
# PUSH_REGISTRY (REGISTRY's own; the local cluster's for the default), each under its tag and,
# as imagebuilder push sends it unchanged, the digest images.txt lists, which the bundle and
# catalog in RELEASE_DIR name. The catalog image's digest is the CatalogSource's image.
.PHONY: release-publish
release-publish: release ## Build release VERSION for REGISTRY (make release) and push every image of it to REGISTRY's registry; RELEASE_DIR/images.txt then names the catalog image to install from, by digest.
	$(OLM_IMAGEBUILDER) $(IMAGE_PUSH) $(RELEASE_IMAGES)/*.tar
	@echo "release v$(VERSION) pushed to $(PUSH_REGISTRY); install from the catalog image" \
		"$$(awk -v image=$(CATALOG_IMG) '$$1 == image { sub(/:[^:\/]*$$/, "", $$1); print $$1 "@" $$2 }' $(RELEASE_DIR)/images.txt)"

# make release-publish against a registry of its own: docker-registry on TEST_PUBLISH_ADDRESS,
# its storage in a temporary directory removed after; then every image of images.txt, and every
# image the bundle and catalog pulled back from that registry name, is checked to be there by
# digest (hack/release/test-publish.sh). TEST_PUBLISH_INSTALL=1 then installs the release through
# OLM on the local cluster from that registry (needs make cluster-up; the nodes reach the
# registry's host through a containerd hosts.toml the script writes, and removes after).
TEST_PUBLISH_ADDRESS ?= 127.0.0.1:5002
TEST_PUBLISH_REGISTRY ?= $(TEST_PUBLISH_ADDRESS)/someorg
TEST_PUBLISH_INSTALL ?=
.PHONY: test-release-registry
test-release-registry: $(OPM) ## Not in CI: make release-publish to a throwaway docker-registry under another name (127.0.0.1:5002/someorg), then every image its bundle and catalog name checked there by digest; TEST_PUBLISH_INSTALL=1 installs it through OLM on the local cluster.
	MAKE="$(MAKE)" VERSION=$(VERSION) TEST_PUBLISH_ADDRESS=$(TEST_PUBLISH_ADDRESS) TEST_PUBLISH_REGISTRY=$(TEST_PUBLISH_REGISTRY) \
		RELEASE_DIR=$(LOCALBIN)/release/test-publish/v$(VERSION) OPM=$(OPM) PACKAGE=$(PACKAGE) \
		TEST_PUBLISH_INSTALL=$(TEST_PUBLISH_INSTALL) CLUSTER_DIR=$(CLUSTER_DIR) \
		hack/release/test-publish.sh

# The proof that the release installs where only a mirror is reachable: its images pushed to the
# local cluster's registry, which every node reaches the public names through (hack/cluster/up.sh),
# none of them imported into a node beforehand; a CatalogSource of the catalog image by digest;
# then the OLM e2e test through it (install the oldest release, upgrade to VERSION, every pod's
# image a digest of images.txt).
#
# The release's images take their tags in the local registry; the tree's catalog's CatalogSource
# goes, as OLM would serve the package from either (make olm-catalog brings both back).
.PHONY: test-release
test-release: release cluster-deploy olm-up ## Not in CI: make release, then install and upgrade it through OLM from the local mirror, every image by digest.
	$(OLM_IMAGEBUILDER) $(CLUSTER_PUSH) $(RELEASE_IMAGES)/*.tar
	$(MAKE) --no-print-directory release-olm-e2e

# The OLM e2e test through a CatalogSource of RELEASE_DIR's catalog image by digest, wherever its
# images were pushed: the local cluster's registry (test-release), or a registry of their own
# (test-release-registry TEST_PUBLISH_INSTALL=1). Needs the cluster, OLM and the operator under
# test as cluster-deploy and olm-up leave them.
.PHONY: release-olm-e2e
release-olm-e2e:
	$(OLM_RUNTIME_KUBECTL) -n olm delete catalogsource $(OLM_RUNTIME_CATALOG_SOURCE) --ignore-not-found
	image=$(CATALOG_IMG) && digest=$$(awk -v image="$$image" '$$1 == image { print $$2 }' $(RELEASE_DIR)/images.txt) && \
	[ -n "$$digest" ] || { echo "$(RELEASE_DIR)/images.txt has no $(CATALOG_IMG)" >&2; exit 1; } && \
	sed -e "s|image: .*|image: $${image%:*}@$$digest|" -e 's|name: etcd-operator-catalog|name: $(RELEASE_CATALOG_SOURCE)|' \
		$(OLM_RUNTIME_MANIFESTS)/catalog/catalogsource.yaml | $(OLM_RUNTIME_KUBECTL) apply --server-side --force-conflicts -f -
	$(CLUSTER_E2E_ENV) E2E_OLM=1 E2E_OLM_CATALOG_SOURCE=$(RELEASE_CATALOG_SOURCE) E2E_OLM_RELEASE_IMAGES=$(RELEASE_DIR)/images.txt \
		go test -tags e2e -count=1 -v -timeout 30m -run '^TestOLMInstallsAndUpgradesWithManualApproval$$' ./test/e2e/
