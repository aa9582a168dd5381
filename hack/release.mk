# A release of VERSION: every image its bundle and catalog name, each pinned by digest, written to
# RELEASE_DIR ready to push to REGISTRY. Included by the Makefile after hack/multiarch.mk and
# hack/olm.mk, whose targets it runs in a copy of this tree, so that bundle/ and catalog/ stay the
# committed, tag-named ones. docs/olm.md says how a release is published and mirrored.
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
	$(OLM_RUNTIME_KUBECTL) -n olm delete catalogsource $(OLM_RUNTIME_CATALOG_SOURCE) --ignore-not-found
	image=$(CATALOG_IMG) && digest=$$(awk -v image="$$image" '$$1 == image { print $$2 }' $(RELEASE_DIR)/images.txt) && \
	[ -n "$$digest" ] || { echo "$(RELEASE_DIR)/images.txt has no $(CATALOG_IMG)" >&2; exit 1; } && \
	sed -e "s|image: .*|image: $${image%:*}@$$digest|" -e 's|name: etcd-operator-catalog|name: $(RELEASE_CATALOG_SOURCE)|' \
		$(OLM_RUNTIME_MANIFESTS)/catalog/catalogsource.yaml | $(OLM_RUNTIME_KUBECTL) apply --server-side --force-conflicts -f -
	$(CLUSTER_E2E_ENV) E2E_OLM=1 E2E_OLM_CATALOG_SOURCE=$(RELEASE_CATALOG_SOURCE) E2E_OLM_RELEASE_IMAGES=$(RELEASE_DIR)/images.txt \
		go test -tags e2e -count=1 -v -timeout 30m -run '^TestOLMInstallsAndUpgradesWithManualApproval$$' ./test/e2e/
