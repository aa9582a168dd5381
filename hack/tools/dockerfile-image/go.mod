// Builds dockerfile-image, which makes the bundle and catalog images from bundle.Dockerfile and
// catalog.Dockerfile when no Docker engine is at hand (hack/olm.mk).
module github.com/etcd-database/etcd-operator/hack/tools/dockerfile-image

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
