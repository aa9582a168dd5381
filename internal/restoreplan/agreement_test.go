package restoreplan

import (
	"strings"
	"testing"

	"github.com/etcd-database/etcd-operator/internal/etcd"
)

func TestDisagreement(t *testing.T) {
	same := etcd.KeyspaceDigest{Revision: 1_000_500, Hash: 42, CompactRevision: 1_000_500, Keys: 500}
	with := func(change func(*etcd.KeyspaceDigest)) etcd.KeyspaceDigest {
		d := same
		change(&d)
		return d
	}
	for _, tc := range []struct {
		name    string
		digests map[string]etcd.KeyspaceDigest
		want    int
		says    string // "" for agreement
	}{
		{"every member the same", map[string]etcd.KeyspaceDigest{"a": same, "b": same, "c": same}, 3, ""},
		{"one member silent", map[string]etcd.KeyspaceDigest{"a": same, "b": same}, 3, "2 of 3 members"},
		{"another hash", map[string]etcd.KeyspaceDigest{"a": same, "b": same, "c": with(func(d *etcd.KeyspaceDigest) { d.Hash = 7 })}, 3, "c has HashKV 7"},
		{"another compact revision", map[string]etcd.KeyspaceDigest{"a": same, "b": with(func(d *etcd.KeyspaceDigest) { d.CompactRevision = 9 })}, 2, "b has HashKV 42, compact revision 9"},
		{"another key count", map[string]etcd.KeyspaceDigest{"a": with(func(d *etcd.KeyspaceDigest) { d.Keys = 499 }), "b": same}, 2, "b has HashKV 42, compact revision 1000500, 500 keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Disagreement(tc.digests, tc.want)
			if (tc.says == "") != (got == "") || !strings.Contains(got, tc.says) {
				t.Errorf("Disagreement = %q, want %q", got, tc.says)
			}
		})
	}
}
