#!/usr/bin/env bash
# make test-release-registry: make release-publish to a registry of its own, under a name that is
# neither the public one nor the local cluster's, then proof from that registry alone that the
# release is there whole: every image of images.txt under its tag and digest, the catalog and
# bundle images holding what RELEASE_DIR holds, every image they name there by digest and
# nothing named anywhere else. With TEST_PUBLISH_INSTALL=1, OLM on the local cluster then installs
# and upgrades the release from that registry (the e2e test of make test-release).
#
# Settings come from the environment (hack/release.mk): MAKE, VERSION, RELEASE_DIR, OPM, PACKAGE,
# TEST_PUBLISH_ADDRESS (host:port on loopback), TEST_PUBLISH_REGISTRY (under it), and for the
# install TEST_PUBLISH_INSTALL and CLUSTER_DIR.
set -euo pipefail

: "${MAKE:=make}" "${VERSION:?}" "${RELEASE_DIR:?}" "${OPM:?}" "${PACKAGE:?}"
: "${TEST_PUBLISH_ADDRESS:?}" "${TEST_PUBLISH_REGISTRY:?}" "${TEST_PUBLISH_INSTALL:=}"

log() { printf '==> %s\n' "$*"; }
die() { printf 'test-release-registry: %s\n' "$*" >&2; exit 1; }

for cmd in docker-registry curl jq sha256sum tar; do
	command -v "$cmd" >/dev/null || die "$cmd is needed (Debian packages docker-registry, curl, jq)"
done
host=$TEST_PUBLISH_ADDRESS
registry=$TEST_PUBLISH_REGISTRY
[[ $registry == "$host"/* ]] || die "TEST_PUBLISH_REGISTRY ($registry) must be under TEST_PUBLISH_ADDRESS ($host)"

work=$(mktemp -d)
registry_pid=
hosts_toml=
cleanup() {
	if [[ -n $registry_pid ]]; then
		kill "$registry_pid" 2>/dev/null || true
		wait "$registry_pid" 2>/dev/null || true
	fi
	[[ -z $hosts_toml ]] || rm -rf "$(dirname "$hosts_toml")"
	rm -rf "$work"
}
trap cleanup EXIT

# --- the registry: docker-registry, its storage in the temporary directory
if curl -sf "http://$host/v2/" >/dev/null; then
	die "a registry already answers on $host: stop it, or set TEST_PUBLISH_ADDRESS"
fi
cat >"$work/registry.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $work/storage
http:
  addr: $host
EOF
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 50); do
	curl -sf "http://$host/v2/" >/dev/null && break
	sleep 0.2
done
curl -sf "http://$host/v2/" >/dev/null || die "docker-registry did not start on $host: $(cat "$work/registry.log")"
log "docker-registry on $host (storage $work/storage)"

# --- the one command
log "make release-publish REGISTRY=$registry VERSION=$VERSION"
start=$SECONDS
"$MAKE" --no-print-directory release-publish REGISTRY="$registry" VERSION="$VERSION" RELEASE_DIR="$RELEASE_DIR"
log "make release-publish took $((SECONDS - start)) s"

# --- the registry's answers, over its HTTP API
accept='application/vnd.oci.image.index.v1+json,application/vnd.oci.image.manifest.v1+json'
accept+=',application/vnd.docker.distribution.manifest.list.v2+json,application/vnd.docker.distribution.manifest.v2+json'
# Counted in a file: some checks run in a command substitution's subshell.
fail() { printf 'FAIL: %s\n' "$*" | tee -a "$work/failures" >&2; }
# repository REFERENCE: a reference's repository in the registry (host and tag or digest taken off).
repository() {
	local name=${1%@*}
	[[ $1 == *@* ]] || name=${1%:*}
	printf '%s\n' "${name#"$host"/}"
}
manifest() { curl -sf -H "Accept: $accept" "http://$host/v2/$1/manifests/$2"; }
# served_digest REPOSITORY TAG: the digest the registry serves the tag under.
served_digest() {
	curl -sfI -H "Accept: $accept" "http://$host/v2/$1/manifests/$2" |
		tr -d '\r' | awk -F': ' 'tolower($1) == "docker-content-digest" { print $2 }'
}
has_blob() { curl -sfI "http://$host/v2/$1/blobs/$2" >/dev/null; }

# check_image REPOSITORY DIGEST: the registry serves that manifest, its bytes hash to the digest,
# and everything it names (an index's images; an image's config and layers) is there too.
check_image() {
	local repo=$1 digest=$2 body child blob
	body=$(manifest "$repo" "$digest") || { fail "$host/$repo@$digest: not in the registry"; return; }
	[[ sha256:$(printf '%s' "$body" | sha256sum | cut -d' ' -f1) == "$digest" ]] ||
		{ fail "$host/$repo@$digest: the registry's manifest has another digest"; return; }
	for child in $(jq -r '.manifests[]?.digest' <<<"$body"); do
		check_image "$repo" "$child"
	done
	for blob in $(jq -r '(.config.digest // empty), (.layers[]?.digest)' <<<"$body"); do
		has_blob "$repo" "$blob" || fail "$host/$repo@$digest: blob $blob missing"
	done
}

# unpack REFERENCE DIR: an image's layers, in order, into DIR.
unpack() {
	local repo digest=${1#*@} layer
	repo=$(repository "$1")
	mkdir -p "$2"
	for layer in $(manifest "$repo" "$digest" | jq -r '.layers[].digest'); do
		curl -sfL "http://$host/v2/$repo/blobs/$layer" | tar -xz -C "$2"
	done
}

# check_names DIR WHAT: DIR names images only in the registry and by digest, none by tag, none
# under the public name; prints the references, one a line.
registry_re=${registry//./\\.}
check_names() {
	local left
	if left=$(grep -rhoE "$registry_re/[a-z0-9._/-]+:[A-Za-z0-9._-]+" "$1" | sort -u) && [[ -n $left ]]; then
		fail "$2 names images by tag: $left"
	fi
	if left=$(grep -rlF 'ghcr.io/etcd-database' "$1") && [[ -n $left ]]; then
		fail "$2 names the public registry ghcr.io/etcd-database ($left)"
	fi
	grep -rhoE "$registry_re/[a-z0-9._/-]+@sha256:[0-9a-f]{64}" "$1" | sort -u || true
}

# 1. Every image of images.txt, under its tag and its digest.
images=$RELEASE_DIR/images.txt
[[ -s $images ]] || die "$images is missing or empty"
released=()
while read -r tag digest; do
	[[ $tag == "$registry"/* ]] || fail "images.txt: $tag is not in $registry"
	repo=$(repository "$tag")
	served=$(served_digest "$repo" "${tag##*:}") || true
	[[ $served == "$digest" ]] || fail "$tag: the registry serves ${served:-nothing}, images.txt says $digest"
	check_image "$repo" "$digest"
	released+=("${tag%:*}@$digest")
done <"$images"
log "checked the ${#released[@]} images of images.txt, under their tags and digests"

ref_of() { awk -v image="$1" '$1 == image { sub(/:[^:\/]*$/, "", $1); print $1 "@" $2 }' "$images"; }
catalog_ref=$(ref_of "$registry/$PACKAGE-catalog:v$VERSION")
bundle_ref=$(ref_of "$registry/$PACKAGE-bundle:v$VERSION")
[[ -n $catalog_ref && -n $bundle_ref ]] || die "images.txt lists no catalog or no bundle image of v$VERSION"

# 2. The catalog image holds RELEASE_DIR/catalog, and names images only by digest, here.
unpack "$catalog_ref" "$work/catalog-image"
diff -r "$RELEASE_DIR/catalog" "$work/catalog-image/configs" ||
	fail "the catalog image's /configs is not $RELEASE_DIR/catalog"
named=$(check_names "$work/catalog-image/configs" "the catalog image")

# 3. Every bundle image the catalog names holds a bundle naming images only by digest, here; the
# head's is RELEASE_DIR/bundle.
bundles=$(grep -rh '^image: ' "$work/catalog-image/configs" | sed 's/^image: //' | sort -u)
[[ -n $bundles ]] || fail "the catalog image names no bundle image"
grep -qxF "$bundle_ref" <<<"$bundles" || fail "the catalog does not name the bundle image $bundle_ref"
n=0
for bundle in $bundles; do
	n=$((n + 1))
	unpack "$bundle" "$work/bundle-$n"
	[[ -d $work/bundle-$n/manifests ]] || { fail "$bundle holds no manifests/"; continue; }
	named+=$'\n'$(check_names "$work/bundle-$n" "bundle image $bundle")
	if [[ $bundle == "$bundle_ref" ]]; then
		for dir in manifests metadata; do
			diff -r "$RELEASE_DIR/bundle/$dir" "$work/bundle-$n/$dir" || fail "$bundle's $dir/ is not $RELEASE_DIR/bundle/$dir"
		done
	fi
done

# 4. What the catalog and bundles name is exactly what was released, the catalog image aside,
# and each of them is in the registry whole.
named=$(grep -v '^$' <<<"$named" | sort -u)
expected=$(printf '%s\n' "${released[@]}" | grep -vxF "$catalog_ref" | sort -u)
[[ $named == "$expected" ]] ||
	fail "the catalog and bundles name other images than images.txt:"$'\n'"$(diff <(printf '%s\n' "$expected") <(printf '%s\n' "$named") || true)"
while read -r ref; do
	check_image "$(repository "$ref")" "${ref#*@}"
done <<<"$named"
log "checked the catalog image, its $n bundle images and the $(wc -l <<<"$named") images they name, in $registry by digest"

# 5. opm reads the catalog image from the registry as OLM's catalog pod serves it. It pulls with
# containers/image, which wants a signature policy: here, any image (the digest is checked).
mkdir -p "$work/.config/containers"
echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$work/.config/containers/policy.json"
if HOME=$work XDG_RUNTIME_DIR=$work "$OPM" render --use-http "$catalog_ref" -o json >"$work/render.json" 2>"$work/render.log"; then
	rendered=$(jq -r 'select(.schema == "olm.bundle") | .image' "$work/render.json" | sort -u)
	[[ $rendered == "$bundles" ]] || fail "opm render of $catalog_ref names other bundle images: $rendered"
	log "opm render $catalog_ref: $(wc -l <<<"$rendered") bundles"
else
	fail "opm render $catalog_ref: $(cat "$work/render.log")"
fi

[[ ! -s $work/failures ]] || die "$(grep -c '^FAIL' "$work/failures") checks failed"
log "release v$VERSION is whole in $registry; catalog image $catalog_ref"

# --- the optional install through OLM on the local cluster, from this registry
[[ -n $TEST_PUBLISH_INSTALL ]] || exit 0
: "${CLUSTER_DIR:?}"
certs=$CLUSTER_DIR/config/certs.d
[[ -d $certs ]] || die "$certs is missing: is the local cluster up (make cluster-up)?"
# The nodes' containerd pulls from this registry over plain HTTP; removed again on exit.
hosts_toml=$certs/$host/hosts.toml
mkdir -p "$(dirname "$hosts_toml")"
cat >"$hosts_toml" <<EOF
server = "http://$host"

[host."http://$host"]
  capabilities = ["pull", "resolve"]
EOF
log "containerd pulls $host over HTTP ($hosts_toml)"
# The cluster and the operator under test as make test-release has them (the cluster's REGISTRY),
# then the OLM e2e test through a CatalogSource of the published catalog image.
"$MAKE" --no-print-directory cluster-deploy olm-up
"$MAKE" --no-print-directory release-olm-e2e REGISTRY="$registry" VERSION="$VERSION" RELEASE_DIR="$RELEASE_DIR"
