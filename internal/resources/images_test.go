package resources

import (
	"strings"
	"testing"
)

var (
	digestA = "@sha256:" + strings.Repeat("a", 64)
	digestB = "@sha256:" + strings.Repeat("b", 64)
)

// An image pinned by digest is run as it is for the version it is the image of, never stripped
// to its repository; every other version is the repository's tag. The operator's default
// (RELATED_IMAGE_ETCD) is taken for the image of the default version unless a v<version> tag
// says otherwise; spec.repository for the image of spec.version.
func TestEtcdImageOfEachVersion(t *testing.T) {
	for _, tc := range []struct {
		name       string
		defaults   string // RELATED_IMAGE_ETCD
		repository string // spec.repository
		version    string // spec.version
		want       map[string]string
	}{
		{"tagged default", "registry/etcd:v3.6.16", "", "3.6.16",
			map[string]string{"3.6.16": "registry/etcd:v3.6.16", "3.7.3": "registry/etcd:v3.7.3"}},
		{"default pinned by digest", "registry/etcd" + digestA, "", "3.6.16",
			map[string]string{"3.6.16": "registry/etcd" + digestA, "3.7.3": "registry/etcd:v3.7.3", "3.6.15": "registry/etcd:v3.6.15"}},
		{"default pinned by digest, registry with a port", "127.0.0.1:5000/etcd" + digestA, "", "3.6.16",
			map[string]string{"3.6.16": "127.0.0.1:5000/etcd" + digestA, "3.7.3": "127.0.0.1:5000/etcd:v3.7.3"}},
		{"default pinned by digest, its version tagged", "registry/etcd:v3.7.3" + digestA, "", "3.7.3",
			map[string]string{"3.7.3": "registry/etcd:v3.7.3" + digestA, "3.6.16": "registry/etcd:v3.6.16"}},
		{"default pinned, a cluster of another version", "registry/etcd" + digestA, "", "3.7.3",
			map[string]string{"3.7.3": "registry/etcd:v3.7.3", "3.6.16": "registry/etcd" + digestA}},
		{"spec.repository by tag overrides the pinned default", "registry/etcd" + digestA, "mirror/etcd", "3.6.16",
			map[string]string{"3.6.16": "mirror/etcd:v3.6.16", "3.7.3": "mirror/etcd:v3.7.3"}},
		{"spec.repository pinned: the image of spec.version", "registry/etcd" + digestA, "mirror/etcd" + digestB, "3.7.3",
			map[string]string{"3.7.3": "mirror/etcd" + digestB, "3.6.16": "mirror/etcd:v3.6.16"}},
		{"spec.repository pinned with a version tag", "registry/etcd:v3.6.16", "mirror/etcd:v3.7.3" + digestB, "3.7.3",
			map[string]string{"3.7.3": "mirror/etcd:v3.7.3" + digestB, "3.6.16": "mirror/etcd:v3.6.16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCluster()
			c.Spec.Repository, c.Spec.Version = tc.repository, tc.version
			images := ClusterImages(c, EtcdImagesOf(tc.defaults, "3.6.16"))
			for version, want := range tc.want {
				if got := images.Image(version); got != want {
					t.Errorf("image of %s = %q, want %q", version, got, want)
				}
			}
		})
	}
}

// The operator may be given an image for other versions than the default's (a release pins each
// etcd version it ships, RELATED_IMAGE_ETCD_V3_7_3 and the like): each runs its version as given,
// pinned by digest or not; a version it was given none for is the repository's tag; and a
// cluster's spec.repository overrides them all, as it overrides the default.
func TestEtcdImagesGivenPerVersion(t *testing.T) {
	images := EtcdImagesOf("registry/etcd"+digestA, "3.6.16").WithVersion("3.7.3", "registry/etcd"+digestB)
	for version, want := range map[string]string{"3.6.16": "registry/etcd" + digestA, "3.7.3": "registry/etcd" + digestB, "3.7.4": "registry/etcd:v3.7.4"} {
		if got := images.Image(version); got != want {
			t.Errorf("image of %s = %q, want %q", version, got, want)
		}
	}
	if more := images.WithVersion("3.7.4", "other/etcd:v3.7.4"); images.Image("3.7.4") != "registry/etcd:v3.7.4" || more.Image("3.7.4") != "other/etcd:v3.7.4" {
		t.Error("WithVersion changed the images it was called on, or did not add the version")
	}
	c := testCluster()
	c.Spec.Repository, c.Spec.Version = "mirror/etcd", "3.6.16"
	if got := ClusterImages(c, images).Image("3.7.3"); got != "mirror/etcd:v3.7.3" {
		t.Errorf("with spec.repository, image of 3.7.3 = %q, want the repository's", got)
	}
}

// Member pods say which version they run: from an image pinned by digest the version cannot be
// read, and a member whose version is unknown would be upgraded again and again.
func TestMemberPodRecordsTheVersionOfAPinnedImage(t *testing.T) {
	c := testCluster()
	pinned := EtcdImagesOf("registry/etcd"+digestA, "3.6.16")
	pod := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16"}, pinned, PodSettings{})
	if img := pod.Spec.Containers[0].Image; img != "registry/etcd"+digestA {
		t.Errorf("image %q, want the pinned one", img)
	}
	if v := PodEtcdVersion(pod); v != "3.6.16" {
		t.Errorf("PodEtcdVersion = %q, want 3.6.16", v)
	}

	// A pod made by an operator that did not record the version: its tag says it.
	delete(pod.Annotations, AnnotationEtcdVersion)
	pod.Spec.Containers[0].Image = "registry/etcd:v3.6.15"
	if v := PodEtcdVersion(pod); v != "3.6.15" {
		t.Errorf("PodEtcdVersion of an unrecorded pod = %q, want its tag's 3.6.15", v)
	}
}
