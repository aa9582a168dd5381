package controllers

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
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

// The event of each certificate issued says why: none there yet, then the renewal window.
func TestCertificateEventsSayWhyTheyWereIssued(t *testing.T) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-1"},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16", TLS: &etcdv1alpha1.TLSSpec{
			Provider: etcdv1alpha1.TLSProviderOperator, Validity: &metav1.Duration{Duration: 90 * 24 * time.Hour},
			RenewBefore: &metav1.Duration{Duration: 30 * 24 * time.Hour}}},
	}
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cluster).Build()
	recorder := events.NewFakeRecorder(10)
	r := &EtcdClusterReconciler{Client: k8s, APIReader: k8s, Recorder: recorder}
	issued := func(at time.Time) []string {
		t.Helper()
		if err := r.issueCertificates(t.Context(), cluster, at); err != nil {
			t.Fatal(err)
		}
		var got []string
		for len(recorder.Events) > 0 {
			if e := <-recorder.Events; strings.Contains(e, "CertificateIssued") {
				got = append(got, e)
			}
		}
		return got
	}

	first := issued(now)
	if len(first) != 3 {
		t.Fatalf("first issue: %d events, want 3: %q", len(first), first)
	}
	for _, e := range first {
		if !strings.Contains(e, certs.ReasonMissing+": there is no certificate") {
			t.Errorf("first issue's event does not say the certificate was missing: %q", e)
		}
	}
	renewed := issued(now.Add(61 * 24 * time.Hour))
	if len(renewed) != 3 {
		t.Fatalf("renewal: %d events, want 3: %q", len(renewed), renewed)
	}
	for _, e := range renewed {
		if !strings.Contains(e, certs.ReasonExpiring+": the certificate expires at") {
			t.Errorf("renewal's event does not say the certificate was expiring: %q", e)
		}
	}
}
