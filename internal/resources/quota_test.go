package resources

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

func TestQuotaBackendBytes(t *testing.T) {
	quantity := func(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
	for _, tc := range []struct {
		name        string
		quota, disk *resource.Quantity
		want        int64
	}{
		{"set quota wins", quantity("1Gi"), quantity("4Gi"), 1 << 30},
		{"set quota above etcd's default", quantity("3Gi"), quantity("4Gi"), 3 << 30},
		{"etcd's default on the default disk", nil, quantity("4Gi"), 2 << 30},
		{"etcd's default on a large disk", nil, quantity("100Gi"), 2 << 30},
		{"three quarters of a small disk", nil, quantity("1Gi"), 768 << 20},
		{"three quarters of the smallest disk", nil, quantity("64Mi"), 48 << 20},
		{"etcd's default without a disk size", nil, nil, 2 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &etcdv1alpha1.EtcdCluster{Spec: etcdv1alpha1.EtcdClusterSpec{
				Storage: etcdv1alpha1.StorageSpec{Size: tc.disk},
				Tuning:  etcdv1alpha1.EtcdTuning{QuotaBackendBytes: tc.quota},
			}}
			if got := QuotaBackendBytes(c); got != tc.want {
				t.Errorf("QuotaBackendBytes = %d, want %d", got, tc.want)
			}
		})
	}
}

// Without tuning.quotaBackendBytes, etcd's own 2Gi default would exceed a small volume: the
// members must always be told the effective quota.
func TestMemberPodAlwaysPassesTheEffectiveQuota(t *testing.T) {
	c := testCluster()
	c.Spec.Tuning.QuotaBackendBytes = nil
	size := resource.MustParse("1Gi")
	c.Spec.Storage.Size = &size
	pod := MemberPod(c, MemberSpec{Name: "prod-aaaaa", Version: "3.6.16", InitialCluster: "x", State: "new"}, EtcdImages{Repository: "registry/etcd"}, PodSettings{})
	if args := pod.Spec.Containers[0].Args; !slices.Contains(args, "--quota-backend-bytes=805306368") {
		t.Errorf("args lack --quota-backend-bytes=805306368 (3/4 of 1Gi): %v", args)
	}
}
