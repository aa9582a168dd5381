package controllers

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/etcd/etcdfake"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// authCluster is a formed one-member cluster with spec.auth, whose member runs and answers,
// reconciled against a scripted etcd.
type authCluster struct {
	cluster  *etcdv1alpha1.EtcdCluster
	k8s      client.Client
	etcd     *etcdfake.Cluster
	r        *EtcdClusterReconciler
	recorder *events.FakeRecorder
}

func newAuthCluster(t *testing.T, userPassword string, record map[string]string, etcdAuth bool, etcdPassword string) *authCluster {
	t.Helper()
	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-1", Generation: 1},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16",
			Auth: &etcdv1alpha1.AuthSpec{RootSecretName: "root"}},
		Status: etcdv1alpha1.EtcdClusterStatus{ClusterID: "1"},
	}
	const member = "c-aaaaa"
	pod := resources.MemberPod(cluster, resources.MemberSpec{Name: member, Version: "3.6.16"}, "registry.test/etcd", nil)
	pod.Status = corev1.PodStatus{PodIP: "10.0.0.1", Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	objects := []client.Object{cluster, pod, resources.MemberPVC(cluster, resources.MemberSpec{Name: member}),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "ns"}, Data: map[string][]byte{"password": []byte(userPassword)}}}
	if record != nil {
		secret := resources.RootCredentials(cluster, record[resources.RootPasswordKey], record[resources.RootPendingPasswordKey])
		objects = append(objects, secret)
	}
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objects...).WithStatusSubresource(cluster).Build()
	clientURL := resources.ClientURL(cluster, member)
	fakeEtcd := &etcdfake.Cluster{
		ID:          1,
		Members:     []etcd.Member{{ID: 1, Name: member, PeerURLs: []string{resources.PeerURL(cluster, member)}, ClientURLs: []string{clientURL}}},
		Statuses:    map[string]etcd.MemberStatus{clientURL: {MemberID: 1, LeaderID: 1, Version: "3.6.16", RaftIndex: 10, RaftAppliedIndex: 10}},
		AuthEnabled: etcdAuth, RootUser: etcdPassword != "", RootPassword: etcdPassword,
	}
	recorder := events.NewFakeRecorder(50)
	r := &EtcdClusterReconciler{Client: k8s, Etcd: etcd.NewCacheWith(fakeEtcd.Dial), Recorder: recorder, DefaultRepository: "registry.test/etcd"}
	return &authCluster{cluster: cluster, k8s: k8s, etcd: fakeEtcd, r: r, recorder: recorder}
}

// reconcile runs n reconciles and returns the cluster as the last one left it.
func (a *authCluster) reconcile(t *testing.T, n int) *etcdv1alpha1.EtcdCluster {
	t.Helper()
	for range n {
		if _, err := a.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.cluster)}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	got := &etcdv1alpha1.EtcdCluster{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// record is the operator's record of the root password.
func (a *authCluster) record(t *testing.T) map[string]string {
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

func (a *authCluster) events() string {
	var out bytes.Buffer
	for {
		select {
		case e := <-a.recorder.Events:
			fmt.Fprintln(&out, e)
		default:
			return out.String()
		}
	}
}

func degradedReason(c *etcdv1alpha1.EtcdCluster) string {
	if cond := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); cond != nil && cond.Status == metav1.ConditionTrue {
		return cond.Reason
	}
	return ""
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
