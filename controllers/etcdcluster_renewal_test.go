package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

func TestNextReconcileComesNoLaterThanTheEarliestRenewal(t *testing.T) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	c := &etcdv1alpha1.EtcdCluster{Status: etcdv1alpha1.EtcdClusterStatus{Certificates: []etcdv1alpha1.CertificateStatus{
		{Name: "ca"},
		{Name: "peer", RenewalTime: &metav1.Time{Time: now.Add(90 * time.Second)}},
		{Name: "server", RenewalTime: &metav1.Time{Time: now.Add(10 * time.Second)}},
	}}}
	for _, tc := range []struct {
		in, want time.Duration
	}{
		{in: 30 * time.Second, want: 10 * time.Second},
		{in: 2 * time.Second, want: 2 * time.Second},
		{in: 0, want: 10 * time.Second},
	} {
		if got := untilRenewal(ctrl.Result{RequeueAfter: tc.in}, c, now).RequeueAfter; got != tc.want {
			t.Errorf("requeue %v with a renewal in 10 s: %v, want %v", tc.in, got, tc.want)
		}
	}
	overdue := untilRenewal(ctrl.Result{}, c, now.Add(time.Hour)).RequeueAfter
	if overdue != time.Second {
		t.Errorf("an overdue renewal requeues after %v, want 1 s (never a hot loop)", overdue)
	}
}
