package controllers

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/certs"
	"github.com/etcd-database/etcd-operator/internal/resources"
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

// The reconciler's clock jumps forward (a node's clock corrected, an operator suspended for
// months): certificates past their renewal time, and past their expiry too, are renewed at the
// next reconcile, each event saying they expired; past the CA's own expiry, nothing is renewed
// against it and the CA is left for the user to replace: a rotation without downtime needs
// members that still accept each other's certificates.
func TestCertificatesAfterTheClockJumpsForward(t *testing.T) {
	start := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	clock := start
	a := operatorTLSCluster(t, &clock)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.cluster)}
	a.reconcile(t, 1)
	a.events()
	caBefore := a.secret(t, resources.CASecretName(a.cluster.Name))

	clock = start.Add(100 * 24 * time.Hour) // past every leaf's expiry, well within the CA's
	result, err := a.r.Reconcile(t.Context(), req)
	if err != nil {
		t.Fatalf("reconcile after the jump: %v", err)
	}
	renewed := 0
	for e := range strings.Lines(a.events()) {
		if strings.Contains(e, "CertificateIssued") {
			renewed++
			if !strings.Contains(e, certs.ReasonExpiring+": the certificate expired at") {
				t.Errorf("the renewal's event does not say the certificate had expired: %q", e)
			}
		}
	}
	if renewed != 3 {
		t.Errorf("%d certificates renewed after the jump, want 3", renewed)
	}
	got := a.reconcile(t, 0)
	for _, cs := range got.Status.Certificates {
		if cs.Name != string(certs.CA) && !cs.NotAfter.After(clock) {
			t.Errorf("status: the %s certificate expires at %v, before the clock's %v", cs.Name, cs.NotAfter, clock)
		}
	}
	if result.RequeueAfter <= time.Second {
		t.Errorf("requeue after %v: the renewed certificates' renewal times are not what the next reconcile waits for", result.RequeueAfter)
	}
	if !bytes.Equal(a.secret(t, resources.CASecretName(a.cluster.Name)).Data[certs.KeyCert], caBefore.Data[certs.KeyCert]) {
		t.Error("the CA was replaced while it was valid")
	}

	clock = start.Add(901 * 24 * time.Hour) // the CA lives ten leaf validities: 900 days
	peerBefore := a.secret(t, resources.TLSSecrets(a.cluster).Peer)
	if _, err := a.r.Reconcile(t.Context(), req); err == nil || !strings.Contains(err.Error(), "must be replaced by hand") {
		t.Fatalf("reconcile past the CA's expiry: %v, want the CA left for the user to replace", err)
	}
	if !bytes.Equal(a.secret(t, resources.CASecretName(a.cluster.Name)).Data[certs.KeyCert], caBefore.Data[certs.KeyCert]) {
		t.Error("the expired CA was replaced: members that trust the old one would refuse every new certificate")
	}
	if !bytes.Equal(a.secret(t, peerBefore.Name).Data[certs.KeyCert], peerBefore.Data[certs.KeyCert]) {
		t.Error("a certificate was issued by an expired CA")
	}
	got = a.reconcile(t, 0)
	degraded := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	if degraded == nil || degraded.Reason != etcdv1alpha1.ReasonCertificateError || !strings.Contains(degraded.Message, "expired at") {
		t.Errorf("Degraded past the CA's expiry: %+v, want CertificateError saying the CA expired", degraded)
	}
	if e := a.events(); !strings.Contains(e, "Warning "+etcdv1alpha1.ReasonCertificateError) {
		t.Errorf("no Warning event for the expired CA:\n%s", e)
	}
}

func (a *scriptedCluster) secret(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	secret := &corev1.Secret{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: a.cluster.Namespace, Name: name}, secret); err != nil {
		t.Fatal(err)
	}
	return secret
}

// A certificate Secret written from a cache behind the API server (the reconciler's own last
// write not seen yet) conflicts: that is no certificate problem, and status does not say one
// (a CA rotation's e2e test once saw Available turn Unknown with CertificateError for it). The
// reconcile looks again shortly, and the write goes through then.
func TestASecretWriteThatConflictsIsNoCertificateError(t *testing.T) {
	start := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	clock := start
	a := operatorTLSCluster(t, &clock)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.cluster)}
	a.reconcile(t, 2)
	if got := a.reconcile(t, 0); !meta.IsStatusConditionTrue(got.Status.Conditions, etcdv1alpha1.ConditionAvailable) {
		t.Fatalf("test setup: not Available: %+v", got.Status.Conditions)
	}
	conflicts := 1
	a.r.Client = interceptor.NewClient(a.r.Client.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, secret := obj.(*corev1.Secret); secret && conflicts > 0 {
				conflicts--
				return apierrors.NewConflict(corev1.Resource("secrets"), obj.GetName(), errors.New("the object has been modified"))
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	clock = start.Add(70 * 24 * time.Hour) // the leaves are due for renewal
	result, err := a.r.Reconcile(t.Context(), req)
	if err != nil || result.RequeueAfter <= 0 || result.RequeueAfter > 2*time.Second {
		t.Fatalf("reconcile with the conflict: result %+v, error %v; want a look again shortly and no error", result, err)
	}
	got := a.reconcile(t, 0)
	if cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionAvailable); cond.Status != metav1.ConditionTrue {
		t.Fatalf("Available %s %s after a conflicting Secret write: %s", cond.Status, cond.Reason, cond.Message)
	}
	if conflicts != 0 {
		t.Fatal("test setup: no Secret was written")
	}
	a.reconcile(t, 1)
	for _, cs := range a.reconcile(t, 0).Status.Certificates {
		if cs.Name != string(certs.CA) && cs.NotAfter.Time.Before(clock.Add(80*24*time.Hour)) {
			t.Errorf("the %s certificate was not renewed at the next look: it expires at %v", cs.Name, cs.NotAfter)
		}
	}
}

// operatorTLSCluster is a scripted cluster of three with operator-issued certificates (valid 90
// days, renewed 30 days before), on a clock the test moves.
func operatorTLSCluster(t *testing.T, clock *time.Time) *scriptedCluster {
	t.Helper()
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.TLS = &etcdv1alpha1.TLSSpec{Provider: etcdv1alpha1.TLSProviderOperator,
			Validity: &metav1.Duration{Duration: 90 * 24 * time.Hour}, RenewBefore: &metav1.Duration{Duration: 30 * 24 * time.Hour}}
	}, nil)
	a.r.Clock = func() time.Time { return *clock }
	return a
}
