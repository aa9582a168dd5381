# OLM packaging: the bundle (bundle/, bundle.Dockerfile), the file-based catalog (catalog/,
# catalog.Dockerfile), their images, and the tools that make them. Included by the Makefile, whose
# VERSION, REGISTRY, IMG, LOCALBIN, KUSTOMIZE and `manifests` target it reuses. docs/olm.md says
# how users install from the catalog and how a new version is added.

##@ OLM

# Versions come from the tools modules' go.mod, the one place they are pinned.
olm_mod_version = $(shell awk '{ for (i = 1; i < NF; i++) if ($$i == "$(2)") { print $$(i+1); exit } }' $(1))
OPERATOR_SDK_VERSION := $(call olm_mod_version,hack/tools/operator-sdk/go.mod,github.com/operator-framework/operator-sdk)
OPM_VERSION := $(call olm_mod_version,hack/tools/opm/go.mod,github.com/operator-framework/operator-registry)

OPERATOR_SDK ?= $(LOCALBIN)/operator-sdk
OPM ?= $(LOCALBIN)/opm
GRPC_HEALTH_PROBE ?= $(LOCALBIN)/grpc_health_probe
DOCKERFILE_IMAGE ?= $(LOCALBIN)/dockerfile-image
# Built by hack/cluster.mk's rule for the same path.
OLM_IMAGEBUILDER ?= $(LOCALBIN)/imagebuilder

PACKAGE := etcd-operator
# The channels the bundle of VERSION is in (CATALOG_TEMPLATE says; bundle/'s annotations repeat it).
CHANNELS ?= candidate,stable
DEFAULT_CHANNEL ?= stable
# The OpenShift versions the bundle is for (com.redhat.openshift.versions): those whose Kubernetes
# is at least the CSV's minKubeVersion, 1.30 (OpenShift 4.17), proven by make test-minkube.
OPENSHIFT_VERSIONS ?= v4.17
BUNDLE_IMG ?= $(REGISTRY)/etcd-operator-bundle:v$(VERSION)
# The tree bundle-build takes bundle.Dockerfile and bundle/ from: this one, or a release's.
BUNDLE_DIR ?= .
# opm render names each bundle's image with this, so the catalog points at what bundle-push pushed.
BUNDLE_IMG_TEMPLATE ?= $(REGISTRY)/etcd-operator-bundle:v{{.Version}}
CATALOG_IMG ?= $(REGISTRY)/etcd-operator-catalog:v$(VERSION)
CATALOG_DIR := catalog/$(PACKAGE)
OPM_IMAGE := quay.io/operator-framework/opm:$(OPM_VERSION)
# Without Docker, images are `docker load`-style tarballs here, named as hack/cluster.mk names its own.
OLM_IMAGES ?= $(LOCALBIN)/images
olm_tar = $(OLM_IMAGES)/$(subst :,_,$(notdir $(1))).tar

# The versions a cluster upgrades from to this one in one step: every release the catalog serves
# (OLM_RELEASES, oldest first). The CSV carries it as olm.skipRange, and make catalog puts it on
# the bundle's channel entries, where OLM reads it.
OLM_SKIP_RANGE = >=$(firstword $(subst @, ,$(firstword $(OLM_RELEASES)))) <$(VERSION)

# The committed config/manifests/bases CSV stays hand-written: the descriptors from the
# +operator-sdk:csv markers are added to a copy, as is the operator image, so `make bundle` leaves
# config/ untouched. operator-sdk v1.42.2's validators (operator-framework/api v0.34.0) warn that
# RBAC on events.k8s.io events uses an API removed in 1.25: a false positive, fixed in api v0.45.0
# (operator-framework/api#378), whose validators test/olm runs and requires clean.
#
# USE_IMAGE_DIGESTS=1 makes a release's bundle (make release): every image the bundle names in
# REGISTRY (the operator, IMG, and every RELATED_IMAGE_* of config/manager, etcd's of each version)
# is pinned by digest (<repository>@sha256:...) wherever the CSV names it, and the CSV claims
# disconnected installs. operator-sdk's knob of that name asks a registry for the digests; here
# imagebuilder pin reads them from the images' tarballs in OLM_IMAGES, which must hold one for
# each (make release builds them), and they are the digests `imagebuilder push` gives the pushed
# images. A bundle left naming one by tag is refused. An etcd image pinned by digest is taken for
# the default etcd version's (main.go), so config/manager's RELATED_IMAGE_ETCD must be tagged
# with that version, and each RELATED_IMAGE_ETCD_V<version> with its own (test/olm checks them).
USE_IMAGE_DIGESTS ?=
.PHONY: bundle
bundle: manifests $(KUSTOMIZE) $(OPERATOR_SDK) $(if $(USE_IMAGE_DIGESTS),$(OLM_IMAGEBUILDER)) ## Regenerate bundle/ and bundle.Dockerfile for VERSION from config/ and api/, and validate them (USE_IMAGE_DIGESTS=1: images pinned by digest).
	work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && \
	cp -r config "$$work/" && \
	(cd "$$work/config/manager" && $(config_set_images)) && \
	$(OPERATOR_SDK) generate kustomize manifests -q --package $(PACKAGE) \
		--input-dir config/manifests --output-dir "$$work/config/manifests" && \
	go run ./hack/csv-descriptors -csv "$$work/config/manifests/bases/$(PACKAGE).clusterserviceversion.yaml" && \
	$(if $(OLM_RELEASES),(cd "$$work/config/manifests" && $(KUSTOMIZE) edit add patch --kind ClusterServiceVersion \
		--patch '[{"op": "add", "path": "/metadata/annotations/olm.skipRange", "value": "$(OLM_SKIP_RANGE)"}]') &&) \
	$(if $(USE_IMAGE_DIGESTS),(cd "$$work/config/manifests" && $(KUSTOMIZE) edit add patch --kind ClusterServiceVersion \
		--patch '[{"op": "replace", "path": "/metadata/annotations/features.operators.openshift.io~1disconnected", "value": "true"}]') &&) \
	rm -rf bundle bundle.Dockerfile && \
	$(KUSTOMIZE) build "$$work/config/manifests" | $(OPERATOR_SDK) generate bundle -q \
		--package $(PACKAGE) --version $(VERSION) --channels $(CHANNELS) --default-channel $(DEFAULT_CHANNEL)
	$(if $(USE_IMAGE_DIGESTS),$(OLM_IMAGEBUILDER) pin -images $(OLM_IMAGES) -registry $(REGISTRY) bundle/manifests/*.yaml)
	printf '\n  # The OpenShift versions the bundle is for: from the one whose Kubernetes is minKubeVersion on.\n  com.redhat.openshift.versions: %s\n' $(OPENSHIFT_VERSIONS) >> bundle/metadata/annotations.yaml
	printf '\n# The OpenShift versions the bundle is for: from the one whose Kubernetes is minKubeVersion on.\nLABEL com.redhat.openshift.versions=%s\n' $(OPENSHIFT_VERSIONS) >> bundle.Dockerfile
	$(OPERATOR_SDK) bundle validate ./bundle --select-optional suite=operatorframework

# The OCI labels name VERSION and IMAGE_REVISION: release-images sets them to the release's.
OLM_BUNDLE_LABELS = $(call image_labels,etcd-operator-bundle,The OLM bundle of etcd Operator,$(VERSION))
.PHONY: bundle-build
bundle-build: ## Build the bundle image BUNDLE_IMG from bundle/: with Docker if a daemon answers, else as a tarball in bin/images/.
	if docker info >/dev/null 2>&1; then \
		docker build -f $(BUNDLE_DIR)/bundle.Dockerfile -t $(BUNDLE_IMG) $(subst -label ,--label ,$(OLM_BUNDLE_LABELS)) $(BUNDLE_DIR); \
	else \
		$(MAKE) --no-print-directory $(DOCKERFILE_IMAGE) && mkdir -p $(OLM_IMAGES) && \
		$(DOCKERFILE_IMAGE) -f $(BUNDLE_DIR)/bundle.Dockerfile -context $(BUNDLE_DIR) -tag $(BUNDLE_IMG) -o $(call olm_tar,$(BUNDLE_IMG)) \
			$(OLM_BUNDLE_LABELS); \
	fi

.PHONY: bundle-push
bundle-push: ## Push BUNDLE_IMG to PUSH_REGISTRY (REGISTRY's, or the local cluster's for the default): with Docker if a daemon answers, else bundle-build's tarball.
	if docker info >/dev/null 2>&1; then \
		docker tag $(BUNDLE_IMG) $(call push_ref,$(BUNDLE_IMG)) && docker push $(call push_ref,$(BUNDLE_IMG)); \
	else \
		$(MAKE) --no-print-directory $(OLM_IMAGEBUILDER) && $(OLM_IMAGEBUILDER) $(IMAGE_PUSH) $(call olm_tar,$(BUNDLE_IMG)); \
	fi

# The catalog is rendered from CATALOG_TEMPLATE, opm's semver template: a release is one line,
# its bundle image, in each channel it goes to. The bundle of VERSION is (re)rendered from bundle/;
# earlier versions' blobs stay as they were released. hack/catalog-template makes the channels
# and the package from the template (as `opm alpha render-template semver` would, with the
# blobs instead of pulling the images); the whole is rendered into a copy and validated there,
# so a refused change leaves catalog/ as it was.
CATALOG_TEMPLATE := catalog-template.yaml
OLM_BUNDLE_BLOB = bundles/$(PACKAGE).v$(VERSION).yaml
.PHONY: catalog
catalog: $(OPM) catalog.Dockerfile ## Render CATALOG_TEMPLATE into catalog/etcd-operator/, with bundle/ as the blob of VERSION, and validate the catalog.
	grep -qx '  version: $(VERSION)' bundle/manifests/$(PACKAGE).clusterserviceversion.yaml || \
		{ echo "bundle/ is not version $(VERSION): run 'make bundle VERSION=$(VERSION)' first" >&2; exit 1; }
	grep -q '^  - image: $(BUNDLE_IMG)$$' $(CATALOG_TEMPLATE) || \
		{ echo "$(CATALOG_TEMPLATE) does not list $(BUNDLE_IMG): add '  - image: $(BUNDLE_IMG)' to the channels it is released to" >&2; exit 1; }
	work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && \
	mkdir -p "$$work/catalog/$(PACKAGE)/bundles" && \
	cp -r $(CATALOG_DIR)/bundles/. "$$work/catalog/$(PACKAGE)/bundles/" && \
	$(OPM) render ./bundle --alpha-image-ref-template '$(BUNDLE_IMG_TEMPLATE)' \
		--migrate-level bundle-object-to-csv-metadata --output=yaml > "$$work/catalog/$(PACKAGE)/$(OLM_BUNDLE_BLOB)" && \
	go run ./hack/catalog-template -template $(CATALOG_TEMPLATE) -catalog "$$work/catalog/$(PACKAGE)" -icon config/manifests/icon.svg && \
	$(OPM) validate "$$work/catalog" && \
	rm -rf $(CATALOG_DIR) && cp -r "$$work/catalog/$(PACKAGE)" $(CATALOG_DIR)

.PHONY: catalog-add
catalog-add: ## Add a new version to the catalog in one step, once CATALOG_TEMPLATE lists it: make catalog-add VERSION=x.y.z (bundle, then catalog).
	$(MAKE) --no-print-directory bundle
	$(MAKE) --no-print-directory catalog

# Every earlier release the catalog serves, as VERSION@COMMIT: the commit its bundle was generated
# in and its operator built from. The catalog keeps a release's blob as it was rendered, naming
# its bundle image, whose CSV names its operator image; release-images rebuilds both from that
# commit's tree, so that a fresh clone can serve the whole upgrade graph (a shallow clone fetches
# the commit from origin first). Cutting a release appends the commit it was cut from (docs/olm.md).
#
# Releases cut before images had public names (0.1.0) named them in the local registry, and were
# never published; release-images renames their bundle's images to REGISTRY's, and their catalog
# blobs name them so, as the first public catalog serves them.
OLM_PRE_PUBLIC_REGISTRY := 127.0.0.1:5000
# The committed catalog and the releases' bundles name their images in PUBLIC_REGISTRY; for
# another REGISTRY, the same repositories there (release-images, release-push, make release).
olm_to_registry = sed 's|$(PUBLIC_REGISTRY)/|$(REGISTRY)/|g'
OLM_RELEASES := \
	0.1.0@d940ae97f626c03e355b2c90a3c94912c8b90741
# The tarballs of the releases' operator images, named after the version only, as olm_tar names them.
OLM_RELEASE_TARS = $(foreach r,$(OLM_RELEASES),$(call olm_tar,etcd-operator:v$(firstword $(subst @, ,$(r)))))

# Each release's operator image is tagged as its CSV's containerImage and its bundle image as the
# catalog's blob names it, so what is built is what OLM will pull. RELEASE_PIN=1 (make release)
# names the bundle's images by the digests of the tarballs in OLM_IMAGES (imagebuilder pin). Built as `make build` builds,
# so that only the release's own packages are compiled, not its dependencies again.
.PHONY: release-images
release-images: $(OLM_IMAGEBUILDER) ## Build the operator and bundle images of every earlier release (OLM_RELEASES) from the commit it was released from.
	work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && \
	for release in $(OLM_RELEASES); do \
		version=$${release%@*} commit=$${release#*@} src="$$work/$${release%@*}"; \
		git cat-file -e "$$commit^{commit}" 2>/dev/null || git fetch --quiet origin "$$commit" 2>/dev/null || \
			git fetch --quiet --unshallow 2>/dev/null || true; \
		git cat-file -e "$$commit^{commit}" 2>/dev/null || \
			{ echo "commit $$commit of release $$version is not in this clone, nor could it be fetched: git fetch --unshallow" >&2; exit 1; }; \
		mkdir "$$src"; \
		git archive "$$commit" | tar -x -C "$$src"; \
		csv="$$src/bundle/manifests/$(PACKAGE).clusterserviceversion.yaml"; \
		grep -qx "  version: $$version" "$$csv" || { echo "commit $$commit has no bundle of version $$version" >&2; exit 1; }; \
		sed -i 's|$(OLM_PRE_PUBLIC_REGISTRY)/|$(REGISTRY)/|g' "$$src"/bundle/manifests/*.yaml; \
		$(olm_to_registry) -i "$$src"/bundle/manifests/*.yaml; \
		img=$$(sed -n 's/^    containerImage: //p' "$$csv"); \
		bundle_img=$$(sed -n 's/^image: //p' $(CATALOG_DIR)/bundles/$(PACKAGE).v$$version.yaml | $(olm_to_registry)); \
		[ -n "$$img" ] && [ -n "$$bundle_img" ] || { echo "release $$version: no containerImage in its CSV or no image in its catalog blob" >&2; exit 1; }; \
		(cd "$$src" && CGO_ENABLED=0 go build -o "$$src/bin/manager" .); \
		mkdir -p $(OLM_IMAGES); \
		$(OLM_IMAGEBUILDER) build -tag "$$img" -o $(OLM_IMAGES)/etcd-operator_v$$version.tar \
			-add "$$src/bin/manager:/manager" -entrypoint /manager -user 65532:65532 \
			$(call image_labels,etcd-operator,$(OPERATOR_IMAGE_DESCRIPTION),$$version,,$$commit); \
		$(if $(RELEASE_PIN),$(OLM_IMAGEBUILDER) pin -images $(OLM_IMAGES) -registry $(REGISTRY) "$$src"/bundle/manifests/*.yaml || exit 1;) \
		$(MAKE) --no-print-directory bundle-build BUNDLE_DIR="$$src" BUNDLE_IMG="$$bundle_img" VERSION=$$version IMAGE_REVISION=$$commit; \
	done

# The operator images are tarballs whatever the engine (imagebuilder made them); the bundle
# images are pushed as bundle-push does.
.PHONY: release-push
release-push: $(OLM_IMAGEBUILDER) ## Push release-images' operator and bundle images to PUSH_REGISTRY (REGISTRY's, or the local cluster's for the default).
	for release in $(OLM_RELEASES); do \
		version=$${release%@*}; \
		$(OLM_IMAGEBUILDER) $(IMAGE_PUSH) $(OLM_IMAGES)/etcd-operator_v$$version.tar; \
		$(MAKE) --no-print-directory bundle-push \
			BUNDLE_IMG="$$(sed -n 's/^image: //p' $(CATALOG_DIR)/bundles/$(PACKAGE).v$$version.yaml | $(olm_to_registry))"; \
	done

# Generated once; test/olm checks that its opm image tag is the opm version pinned here. After
# raising that version: rm catalog.Dockerfile && make catalog.Dockerfile.
catalog.Dockerfile: | $(OPM)
	mkdir -p catalog
	$(OPM) generate dockerfile catalog --base-image=$(OPM_IMAGE) --builder-image=$(OPM_IMAGE)

# Without Docker the Dockerfile's FROM and RUN are done here: the opm image's binaries are ours,
# built from the same opm version, and the serve cache its RUN pre-builds comes from our opm.
OLM_CATALOG_LABELS = $(call image_labels,etcd-operator-catalog,The file-based OLM catalog of etcd Operator served by opm,$(VERSION))
.PHONY: catalog-build
catalog-build: catalog.Dockerfile ## Build the catalog image CATALOG_IMG: with Docker if a daemon answers, else as a tarball in bin/images/.
	if docker info >/dev/null 2>&1; then \
		docker build -f catalog.Dockerfile -t $(CATALOG_IMG) $(subst -label ,--label ,$(OLM_CATALOG_LABELS)) .; \
	else \
		$(MAKE) --no-print-directory $(OPM) $(GRPC_HEALTH_PROBE) $(DOCKERFILE_IMAGE) && \
		work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && \
		$(OPM) serve catalog --cache-dir="$$work/cache" --cache-only && \
		mkdir -p $(OLM_IMAGES) && \
		$(DOCKERFILE_IMAGE) -f catalog.Dockerfile -tag $(CATALOG_IMG) -o $(call olm_tar,$(CATALOG_IMG)) \
			-dir /tmp:1777 -add $(OPM):/bin/opm -add $(GRPC_HEALTH_PROBE):/bin/grpc_health_probe \
			-add catalog:/configs -add "$$work/cache":/tmp/cache $(OLM_CATALOG_LABELS); \
	fi

.PHONY: catalog-push
catalog-push: ## Push CATALOG_IMG to PUSH_REGISTRY (REGISTRY's, or the local cluster's for the default): with Docker if a daemon answers, else catalog-build's tarball.
	if docker info >/dev/null 2>&1; then \
		docker tag $(CATALOG_IMG) $(call push_ref,$(CATALOG_IMG)) && docker push $(call push_ref,$(CATALOG_IMG)); \
	else \
		$(MAKE) --no-print-directory $(OLM_IMAGEBUILDER) && $(OLM_IMAGEBUILDER) $(IMAGE_PUSH) $(call olm_tar,$(CATALOG_IMG)); \
	fi

# operator-sdk stamps its version into the bundle's labels; unstamped it writes "unknown".
$(OPERATOR_SDK):
	$(call building,operator-sdk $(OPERATOR_SDK_VERSION),a few minutes)
	cd hack/tools/operator-sdk && CGO_ENABLED=0 go build -tags=containers_image_openpgp \
		-ldflags "$(foreach v,Version GitVersion ImageVersion,-X github.com/operator-framework/operator-sdk/internal/version.$(v)=$(OPERATOR_SDK_VERSION))" \
		-o $@ github.com/operator-framework/operator-sdk/cmd/operator-sdk

# Static, as upstream's opm image has it, so that the same binary serves the catalog image, which
# has no libc (netgo and osusergo keep glibc's NSS out). The linker warns that sqlite and pkcs11
# use dlopen; neither is reached by render, validate or serve of a file-based catalog.
$(OPM):
	$(call building,opm $(OPM_VERSION),a few minutes)
	cd hack/tools/opm && CGO_ENABLED=1 go build -tags=json1,containers_image_openpgp,netgo,osusergo \
		-ldflags "-X github.com/operator-framework/operator-registry/cmd/opm/version.opmVersion=$(OPM_VERSION) -extldflags=-static" \
		-o $@ github.com/operator-framework/operator-registry/cmd/opm

# OLM's catalog pods probe the registry server with it.
$(GRPC_HEALTH_PROBE):
	cd hack/tools/opm && CGO_ENABLED=0 go build -o $@ github.com/grpc-ecosystem/grpc-health-probe

$(DOCKERFILE_IMAGE): hack/tools/dockerfile-image/main.go hack/tools/dockerfile-image/go.mod
	cd hack/tools/dockerfile-image && go build -o $@ .
