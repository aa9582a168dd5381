package controllers

import "k8s.io/apimachinery/pkg/util/version"

// compareVersions orders two etcd versions: -1, 0 or 1 as a is older than, the same as, or
// newer than b, down to the minor version when minorOnly (etcd's data format follows the minor
// version) and to the patch otherwise. known is false when either does not parse; the one that
// does not then sorts after the one that does, so that a version the operator cannot read is
// never taken for the oldest.
func compareVersions(a, b string, minorOnly bool) (cmp int, known bool) {
	va, errA := version.ParseGeneric(a)
	vb, errB := version.ParseGeneric(b)
	switch {
	case errA != nil && errB != nil:
		return 0, false
	case errA != nil:
		return 1, false
	case errB != nil:
		return -1, false
	}
	if minorOnly {
		va, vb = version.MajorMinor(va.Major(), va.Minor()), version.MajorMinor(vb.Major(), vb.Minor())
	}
	switch {
	case va.LessThan(vb):
		return -1, true
	case vb.LessThan(va):
		return 1, true
	}
	return 0, true
}

// tooOld says whether target is an older etcd minor version than the snapshot's: etcd reads
// the data of its own and older versions only. An unknown version is not too old: etcdutl and
// etcd themselves refuse what they cannot read.
func tooOld(target, snapshot string) bool {
	cmp, known := compareVersions(target, snapshot, true)
	return known && cmp < 0
}
