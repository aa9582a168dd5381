package controllers

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The operator's endpoint serves controller-runtime's registry: what a reconcile records there
// is what Prometheus scrapes.
func TestReconcilingAClusterYieldsItsSeriesAndDeletingItRemovesThem(t *testing.T) {
	f := newEnvCluster(t, "metrics")
	if err := f.reconcile(t); err != nil {
		t.Fatal(err)
	}
	series := seriesIn(t, "metrics")
	for name, want := range map[string]float64{
		`etcd_operator_cluster_desired_members{}`:               3,
		`etcd_operator_cluster_healthy_voting_members{}`:        3,
		`etcd_operator_cluster_quorum{}`:                        2,
		`etcd_operator_cluster_has_leader{}`:                    1,
		`etcd_operator_cluster_operation{operation="None"}`:     1,
		`etcd_operator_cluster_alarm_members{alarm="NOSPACE"}`:  0,
		`etcd_operator_member_db_size_bytes{member="c-m0001"}`:  1 << 20,
		`etcd_operator_member_healthy{member="c-m0002"}`:        1,
		`etcd_operator_cluster_quota_backend_bytes{}`:           float64(resources.QuotaBackendBytes(f.cluster)),
		`etcd_operator_cluster_leader_changes_observed_total{}`: 0,
	} {
		if got, ok := series[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if _, ok := series[`etcd_operator_cluster_last_successful_reconcile_timestamp_seconds{}`]; !ok {
		t.Errorf("no heartbeat after a successful reconcile; series: %v", slices.Sorted(maps.Keys(series)))
	}

	// A member's pod stops being Ready: the next look counts it unhealthy.
	pod := &corev1.Pod{}
	if err := f.k8s.Get(t.Context(), client.ObjectKey{Namespace: "metrics", Name: "c-m0002"}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if err := f.k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() error {
		if err := f.reconcile(t); err != nil {
			return err
		}
		series := seriesIn(t, "metrics")
		if got := series[`etcd_operator_cluster_healthy_voting_members{}`]; got != 2 {
			return fmt.Errorf("healthy voting members %v, want 2 with a pod not ready", got)
		}
		if got := series[`etcd_operator_member_healthy{member="c-m0002"}`]; got != 0 {
			return fmt.Errorf("member c-m0002 healthy = %v, want 0", got)
		}
		return nil
	})

	if err := f.k8s.Delete(t.Context(), f.get(t)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() error {
		if err := f.reconcile(t); err != nil {
			return err
		}
		if left := seriesIn(t, "metrics"); len(left) > 0 {
			return fmt.Errorf("series of a deleted cluster remain: %v", slices.Sorted(maps.Keys(left)))
		}
		return nil
	})
}

// seriesIn gathers the registry's etcd_operator series of the objects in namespace, by name
// and their labels other than namespace and name, as `name{label="value",...}`.
func seriesIn(t *testing.T, namespace string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range families {
		if !strings.HasPrefix(mf.GetName(), "etcd_operator_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			inNamespace := false
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace":
					inNamespace = l.GetValue() == namespace
				case "name":
				default:
					labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
			}
			if inNamespace {
				out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = value(m)
			}
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}
