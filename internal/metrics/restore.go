package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// restorePhases are the phases whose series a restore always has, 1 for its own.
var restorePhases = []etcdv1alpha1.RestorePhase{
	etcdv1alpha1.RestorePending, etcdv1alpha1.RestoreRestoring, etcdv1alpha1.RestoreCompleted, etcdv1alpha1.RestoreFailed,
}

// RestoreValues is what the series of one EtcdRestore say, all read from its spec and status.
type RestoreValues struct {
	Cluster string
	Mode    string
	Phase   etcdv1alpha1.RestorePhase
	// Duration is from the restore's start to its outcome, 0 until it has one.
	Duration time.Duration
}

// RestoreValuesOf reads the series' values from a restore's spec and status.
func RestoreValuesOf(rs *etcdv1alpha1.EtcdRestore) RestoreValues {
	v := RestoreValues{Cluster: rs.Spec.Target.ClusterName, Mode: string(rs.Spec.Target.Mode), Phase: rs.Status.Phase}
	if rs.Status.StartTime != nil && rs.Status.CompletionTime != nil {
		v.Duration = rs.Status.CompletionTime.Sub(rs.Status.StartTime.Time)
	}
	return v
}

// RestoreCollector emits the series of every EtcdRestore recorded and not forgotten.
type RestoreCollector struct {
	entries store[RestoreValues]

	phase, duration *prometheus.Desc
}

func newRestoreCollector() *RestoreCollector {
	return &RestoreCollector{
		phase:    desc("restore_phase", "1 for the phase the restore is in (Pending, Restoring, Completed, Failed), 0 for the others.", "cluster", "mode", "phase"),
		duration: desc("restore_duration_seconds", "How long the restore took, from its start to its outcome; absent until it has one.", "cluster", "mode"),
	}
}

// Record records a restore's status as the reconcile wrote it.
func (rc *RestoreCollector) Record(rs *etcdv1alpha1.EtcdRestore) {
	values := RestoreValuesOf(rs)
	rc.entries.update(types.NamespacedName{Namespace: rs.Namespace, Name: rs.Name}, func(RestoreValues) RestoreValues { return values })
}

// Forget removes every series of a restore that is deleted.
func (rc *RestoreCollector) Forget(key types.NamespacedName) {
	rc.entries.forget(key)
}

// Describe sends every descriptor of the family.
func (rc *RestoreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rc.phase
	ch <- rc.duration
}

// Collect sends the series of every recorded restore.
func (rc *RestoreCollector) Collect(ch chan<- prometheus.Metric) {
	rc.entries.each(func(key types.NamespacedName, v RestoreValues) {
		out := emitter{ch: ch, key: key}
		for _, phase := range restorePhases {
			out.gauge(rc.phase, boolValue(v.Phase == phase), v.Cluster, v.Mode, string(phase))
		}
		if v.Duration > 0 {
			out.gauge(rc.duration, v.Duration.Seconds(), v.Cluster, v.Mode)
		}
	})
}
