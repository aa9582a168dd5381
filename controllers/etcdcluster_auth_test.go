package controllers

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

func newAuthCluster(t *testing.T, userPassword string, record map[string]string, etcdAuth bool, etcdPassword string) *scriptedCluster {
	t.Helper()
	var extra []client.Object
	extra = append(extra, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "ns"}, Data: map[string][]byte{"password": []byte(userPassword)}})
	withAuth := func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.Auth = &etcdv1alpha1.AuthSpec{RootSecretName: "root"}
		if record != nil {
			extra = append(extra, resources.RootCredentials(c, record[resources.RootPasswordKey], record[resources.RootPendingPasswordKey]))
		}
	}
	a := newScriptedCluster(t, 1, withAuth, func() []client.Object { return extra })
	a.etcd.AuthEnabled, a.etcd.RootUser, a.etcd.RootPassword = etcdAuth, etcdPassword != "", etcdPassword
	return a
}

// record is the operator's record of the root password.
func (a *scriptedCluster) record(t *testing.T) map[string]string {
	t.Helper()
	secret := &corev1.Secret{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.RootCredentialsSecretName("c")}, secret); err != nil {
		t.Fatalf("the operator's record of the root password: %v", err)
	}
	out := map[string]string{}
	for k, v := range secret.Data {
		out[k] = string(v)
	}
	return out
}

// Rotating the password in the user's Secret changes it in etcd: the operator authenticates
// with the password etcd has (its own record), sets the new one, and records it. Before, it
// authenticated with the user's new password, which etcd refused: it was locked out for good.
func TestRotatedRootPasswordIsChangedInEtcd(t *testing.T) {
	a := newAuthCluster(t, "rotated", map[string]string{"password": "original"}, true, "original")
	got := a.reconcile(t, 3)
	if pw := a.etcd.Password(); pw != "rotated" {
		t.Fatalf("etcd's root password is %q, want the rotated one (calls %v; conditions %+v)", pw, a.etcd.Calls, got.Status.Conditions)
	}
	if rec := a.record(t); rec["password"] != "rotated" || rec["pending"] != "" {
		t.Fatalf("record %v, want the rotated password and nothing pending", rec)
	}
	if slices.Contains(a.etcd.Calls, "EnableAuth") || degradedReason(got) == etcdv1alpha1.ReasonCredentialsRejected {
		t.Fatalf("calls %v, degraded %q", a.etcd.Calls, degradedReason(got))
	}
	if ev := a.events(); !strings.Contains(ev, "ChangeRootPassword") || !strings.Contains(ev, etcdv1alpha1.ReasonAuthWithoutTLS) {
		t.Fatalf("events %q, want the change and the warning about auth without TLS", ev)
	}
	// Once done, nothing more is changed.
	calls := len(a.etcd.Calls)
	a.reconcile(t, 2)
	if len(a.etcd.Calls) != calls {
		t.Fatalf("further calls after the rotation: %v", a.etcd.Calls[calls:])
	}
}

// A change interrupted after etcd took the new password but before the record said so: the
// operator authenticates with the pending password and completes the record, changing nothing.
func TestInterruptedPasswordChangeIsCompletedNotLockedOut(t *testing.T) {
	a := newAuthCluster(t, "rotated", map[string]string{"password": "original", "pending": "rotated"}, true, "rotated")
	got := a.reconcile(t, 2)
	if rec := a.record(t); rec["password"] != "rotated" || rec["pending"] != "" {
		t.Fatalf("record %v, want the password etcd has and nothing pending", rec)
	}
	if len(a.etcd.Calls) != 0 || degradedReason(got) != "" {
		t.Fatalf("calls %v, degraded %q: the change was already done", a.etcd.Calls, degradedReason(got))
	}
}

// A cluster made by an earlier operator version has no record: it is made from the password
// etcd accepts (the user's), and the agent Jobs read it from there.
func TestRecordIsMadeForAClusterWithoutOne(t *testing.T) {
	a := newAuthCluster(t, "original", nil, true, "original")
	a.reconcile(t, 1)
	if rec := a.record(t); rec["password"] != "original" {
		t.Fatalf("record %v", rec)
	}
	if len(a.etcd.Calls) != 0 {
		t.Fatalf("calls %v", a.etcd.Calls)
	}
}

// Enabling authentication gives the root user the user's password even if a root user was
// left with another one, records it first, and warns when there is no TLS.
func TestEnableAuthSetsTheUsersPassword(t *testing.T) {
	a := newAuthCluster(t, "wanted", nil, false, "leftover")
	a.reconcile(t, 3)
	if !a.etcd.AuthEnabled || a.etcd.Password() != "wanted" {
		t.Fatalf("auth %v with password %q (calls %v)", a.etcd.AuthEnabled, a.etcd.Password(), a.etcd.Calls)
	}
	if rec := a.record(t); rec["password"] != "wanted" || rec["pending"] != "" {
		t.Fatalf("record %v", rec)
	}
	if ev := a.events(); !strings.Contains(ev, etcdv1alpha1.ReasonAuthWithoutTLS) {
		t.Fatalf("events %q, want a warning about auth without TLS", ev)
	}
}

// A password changed outside the operator (etcdctl user passwd) leaves it no password etcd
// accepts: status says so, names the Secret to fix, and nothing else is attempted.
func TestPasswordUnknownToTheOperatorIsReported(t *testing.T) {
	a := newAuthCluster(t, "wanted", map[string]string{"password": "original"}, true, "changed-by-hand")
	got := a.reconcile(t, 1)
	cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionDegraded)
	if cond == nil || cond.Reason != etcdv1alpha1.ReasonCredentialsRejected || !strings.Contains(cond.Message, "Secret root") {
		t.Fatalf("degraded %+v, want CredentialsRejected naming Secret root", cond)
	}
	if len(a.etcd.Calls) != 0 {
		t.Fatalf("calls %v", a.etcd.Calls)
	}
	if ev := a.events(); !strings.Contains(ev, etcdv1alpha1.ReasonCredentialsRejected) {
		t.Fatalf("events %q", ev)
	}
}
