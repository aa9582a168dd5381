package resources

import (
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// EtcdImages says which image runs each etcd version: <Repository>:v<version>, by tag, but for
// PinnedVersion, whose image is Pinned, a reference pinned by digest, run as it is, and for a
// version of Versions, whose image is given (the operator's RELATED_IMAGE_ETCD_V<version>).
//
// A digest names one build of one version, so it cannot serve another: the other versions of a
// pinned repository are its tags, unless Versions names their own. Mirrors for disconnected
// clusters (an ImageDigestMirrorSet) serve references pinned by digest, so a pinned image must
// reach the pod as it was given.
type EtcdImages struct {
	Repository    string
	Pinned        string
	PinnedVersion string
	Versions      map[string]string
}

// WithVersion is i with ref the image of version.
func (i EtcdImages) WithVersion(version, ref string) EtcdImages {
	versions := make(map[string]string, len(i.Versions)+1)
	maps.Copy(versions, i.Versions)
	versions[version] = ref
	i.Versions = versions
	return i
}

// EtcdImagesOf reads an image reference, <repository>[:<tag>][@sha256:<digest>]: a tag is
// dropped, and a reference pinned by digest is the image of pinnedVersion, or of the version its
// tag names (v<version>) if it has one.
func EtcdImagesOf(ref, pinnedVersion string) EtcdImages {
	name, digest, pinned := strings.Cut(ref, "@")
	repository, tag := name, ""
	if colon := strings.LastIndex(name, ":"); colon > strings.LastIndex(name, "/") {
		repository, tag = name[:colon], name[colon+1:]
	}
	images := EtcdImages{Repository: repository}
	if pinned && digest != "" {
		images.Pinned, images.PinnedVersion = ref, pinnedVersion
		if v, ok := strings.CutPrefix(tag, "v"); ok {
			if _, err := version.ParseSemantic(v); err == nil {
				images.PinnedVersion = v
			}
		}
	}
	return images
}

// Image is the image of version.
func (i EtcdImages) Image(version string) string {
	if i.Pinned != "" && version == i.PinnedVersion {
		return i.Pinned
	}
	if ref, ok := i.Versions[version]; ok {
		return ref
	}
	return i.Repository + ":v" + version
}

// ClusterImages are the images of the cluster's members: spec.repository's, pinned by digest for
// spec.version if it has one, or else the operator's defaults.
func ClusterImages(c *etcdv1alpha1.EtcdCluster, defaults EtcdImages) EtcdImages {
	if c.Spec.Repository == "" {
		return defaults
	}
	return EtcdImagesOf(c.Spec.Repository, c.Spec.Version)
}

// PodEtcdVersion is the etcd version a member pod runs: as recorded when it was made or
// upgraded, or for a pod made by an operator that did not record it, as its image's tag says.
func PodEtcdVersion(pod *corev1.Pod) string {
	if v, ok := pod.Annotations[AnnotationEtcdVersion]; ok {
		return v
	}
	return VersionOfImage(pod.Spec.Containers[0].Image)
}
