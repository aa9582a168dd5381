#!/usr/bin/env bash
# Loads image tarballs made by imagebuilder into the running cluster: imported into containerd's
# k8s.io namespace, so pods start from them without any pull, and pushed to the local registry,
# for whatever pulls by reference (OLM's bundle and catalog images, imagePullPolicy: Always); an
# image named in the mirrored registry (the release's public names) goes there under its repository.
#
#   load-images.sh IMAGE.tar...
#
# A tarball is loaded again only when it changed since it was last loaded.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${CLUSTER_IMAGEBUILDER:=$CLUSTER_BIN/imagebuilder}"

((EUID == 0)) || die "must run as root to talk to the cluster's containerd"
running containerd || die "the cluster's containerd is not running: run make cluster-up"
running registry || die "the cluster's registry is not running: run make cluster-up"

stamps=$CLUSTER_DIR/loaded-images
mkdir -p "$stamps"

load() {
	local tar=$1 stamp current
	stamp=$stamps/$(basename "$tar").stamp
	current=$(stat -c '%s %Y' "$tar")
	[[ -f $stamp && $(<"$stamp") == "$current" ]] && return
	ctr images import "$tar" >/dev/null
	"$CLUSTER_IMAGEBUILDER" push -registry "$CLUSTER_REGISTRY" -mirror-of "$CLUSTER_MIRRORED_REGISTRY" "$tar" >/dev/null
	echo "$current" >"$stamp"
	log "loaded $(basename "$tar")"
}

# In parallel: each load is mostly waiting on disk and on one of the two daemons.
pids=()
for tar in "$@"; do
	load "$tar" &
	pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do
	wait "$pid" || failed=1
done
((failed == 0)) || die "loading images failed (messages above)"
