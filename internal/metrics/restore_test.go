package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

func TestRestoreSeriesTellPhaseAndDurationAndGoWithTheRestore(t *testing.T) {
	rc := newRestoreCollector()
	rs := &etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "undo"}}
	rs.Spec.Target = etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: "etcd"}
	rs.Status.Phase, rs.Status.StartTime = etcdv1alpha1.RestoreRestoring, &metav1.Time{Time: t0}
	rc.Record(rs)
	if got := RestoreValuesOf(rs).Duration; got != 0 {
		t.Errorf("a restore under way has a duration: %v", got)
	}

	rs.Status.Phase, rs.Status.CompletionTime = etcdv1alpha1.RestoreFailed, &metav1.Time{Time: t0.Add(150 * time.Second)}
	rc.Record(rs)
	want := `
# HELP etcd_operator_restore_duration_seconds How long the restore took, from its start to its outcome; absent until it has one.
# TYPE etcd_operator_restore_duration_seconds gauge
etcd_operator_restore_duration_seconds{cluster="etcd",mode="InPlace",name="undo",namespace="ns"} 150
# HELP etcd_operator_restore_phase 1 for the phase the restore is in (Pending, Restoring, Completed, Failed), 0 for the others.
# TYPE etcd_operator_restore_phase gauge
etcd_operator_restore_phase{cluster="etcd",mode="InPlace",name="undo",namespace="ns",phase="Completed"} 0
etcd_operator_restore_phase{cluster="etcd",mode="InPlace",name="undo",namespace="ns",phase="Failed"} 1
etcd_operator_restore_phase{cluster="etcd",mode="InPlace",name="undo",namespace="ns",phase="Pending"} 0
etcd_operator_restore_phase{cluster="etcd",mode="InPlace",name="undo",namespace="ns",phase="Restoring"} 0
`
	if err := testutil.CollectAndCompare(rc, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(rc); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	rc.Forget(types.NamespacedName{Namespace: "ns", Name: "undo"})
	if n := testutil.CollectAndCount(rc); n != 0 {
		t.Errorf("%d series of a forgotten restore remain", n)
	}
}
