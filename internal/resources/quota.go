package resources

import (
	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// defaultQuotaBackendBytes is etcd's own default backend quota.
const defaultQuotaBackendBytes int64 = 2 << 30

// QuotaBackendBytes is the backend quota every member runs with: tuning.quotaBackendBytes when
// set, else etcd's default of 2Gi capped at three quarters of the member's volume, so that etcd
// raises NOSPACE, and keeps serving reads, while its WAL and snapshots still fit on the volume.
func QuotaBackendBytes(c *etcdv1alpha1.EtcdCluster) int64 {
	if q := c.Spec.Tuning.QuotaBackendBytes; q != nil {
		return q.Value()
	}
	quota := defaultQuotaBackendBytes
	if size := c.Spec.Storage.Size; size != nil {
		quota = min(quota, size.Value()/4*3)
	}
	return quota
}

// QuotaNotBelowStorage says whether an explicit tuning.quotaBackendBytes is at least the
// member's volume: the volume then fills up, with the WAL and snapshots, before etcd raises
// NOSPACE, and the member stops instead of refusing writes. Admission cannot check it without
// making clusters created under the earlier default (2Gi on smaller volumes) uneditable.
func QuotaNotBelowStorage(c *etcdv1alpha1.EtcdCluster) bool {
	q := c.Spec.Tuning.QuotaBackendBytes
	if q == nil {
		return false
	}
	size := MemberStorageSize(c)
	return size.Value() > 0 && q.Value() >= size.Value()
}
