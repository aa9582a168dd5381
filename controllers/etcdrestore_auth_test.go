package controllers

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// hourlyOfC is EtcdBackup "hourly" of EtcdCluster "c", whose snapshot (taken 2026-11-24 at
// 12:30) is recorded as taken with authentication on, off, or neither (nil: not known).
func hourlyOfC(auth *bool) *etcdv1alpha1.EtcdBackup {
	b := completedBackup("hourly", "c", 30, 700)
	b.Status.LastBackup.AuthEnabled = auth
	return b
}

// restoreOfHourly restores EtcdBackup hourly's snapshot into a new EtcdCluster "copy" of spec
// target.
func restoreOfHourly(target *etcdv1alpha1.EtcdClusterSpec) *etcdv1alpha1.EtcdRestore {
	rs := inPlaceRestore("copy")
	rs.Spec.Source = etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "hourly"}}
	rs.Spec.Target = etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreNew, ClusterName: "copy", Cluster: target}
	return rs
}

// clusterWithRootPasswords is EtcdCluster c with spec.auth and the operator's record of the
// root passwords it set on it, with when.
func clusterWithRootPasswords(t *testing.T, sets ...resources.RootPasswordSet) []client.Object {
	t.Helper()
	c := formedCluster(nil)
	c.Spec.Auth = &etcdv1alpha1.AuthSpec{RootSecretName: "root"}
	record, err := resources.RootCredentials(c, resources.RootRecord{Password: sets[0].Password}.WithPasswordsSet(sets...))
	if err != nil {
		t.Fatal(err)
	}
	return []client.Object{c, record}
}

func on() *bool  { v := true; return &v }
func off() *bool { v := false; return &v }

// A restore into a new cluster without auth of a snapshot recorded as taken with
// authentication on is refused before anything is made: restored, etcd would refuse the
// operator everything, and the cluster would never serve. The refusal names the snapshot and the
// fix, and says what the Secret must hold: any password when the operator kept root's password
// of then for the backed-up cluster (it logs in with it, then sets the Secret's), else that one.
// Before, the cluster was created, its members restored, and the restore waited 15 minutes to
// say ClusterNotServing, the cluster's status that its members did not answer.
func TestARestoreOfASnapshotWithAuthIntoANewClusterWithoutAuthIsRefused(t *testing.T) {
	snapshotTaken := time.Date(2026, 11, 24, 12, 30, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		source []client.Object
		says   []string
	}{
		"the backed-up cluster's passwords reach back to the snapshot": {
			clusterWithRootPasswords(t, resources.RootPasswordSet{Password: "now", At: metav1.NewTime(snapshotTaken.AddDate(0, 0, 2))},
				resources.RootPasswordSet{Password: "at-backup", At: metav1.NewTime(snapshotTaken.AddDate(0, 0, -4))}),
			[]string{"a password of your choice", "kept for EtcdCluster c", "since 2026-11-20T12:30:00Z"},
		},
		"the backed-up cluster's passwords were all set after the snapshot": {
			clusterWithRootPasswords(t, resources.RootPasswordSet{Password: "now", At: metav1.NewTime(snapshotTaken.AddDate(0, 0, 2))}),
			[]string{"root's password when the snapshot was taken (2026-11-24T12:30:00Z)", "EtcdCluster c", "since 2026-11-26T12:30:00Z"},
		},
		"the backed-up cluster is gone": {
			nil,
			[]string{"root's password when the snapshot was taken (2026-11-24T12:30:00Z)", "keeps no passwords of EtcdCluster c"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			rs := restoreOfHourly(&etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16"})
			r, k8s := restoreReconciler(t, append([]client.Object{rs, hourlyOfC(on())}, tc.source...)...)
			recorder := events.NewFakeRecorder(10)
			r.Recorder = recorder

			got := reconcileRestore(t, r, rs)
			cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
			if got.Status.Phase != etcdv1alpha1.RestoreFailed || cond == nil || cond.Reason != etcdv1alpha1.ReasonAuthRequired {
				t.Fatalf("restore %s, Succeeded %+v; want it Failed with reason AuthRequired", got.Status.Phase, cond)
			}
			for _, want := range append([]string{"pvc://backups/hourly.db", "authentication on", "target.cluster.auth.rootSecretName",
				"nothing was created"}, tc.says...) {
				if !strings.Contains(cond.Message, want) {
					t.Errorf("the refusal %q does not say %q", cond.Message, want)
				}
			}
			for _, password := range []string{"now", "at-backup"} {
				if strings.Contains(cond.Message, `"`+password+`"`) || strings.Contains(cond.Message, " "+password+" ") {
					t.Errorf("the refusal gives a password away: %q", cond.Message)
				}
			}
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "copy"}, &etcdv1alpha1.EtcdCluster{}); !apierrors.IsNotFound(err) {
				t.Errorf("EtcdCluster copy: %v, want it never created", err)
			}
			jobs := &batchv1.JobList{}
			if err := k8s.List(t.Context(), jobs); err != nil || len(jobs.Items) != 0 {
				t.Errorf("restore Jobs %d (%v), want none", len(jobs.Items), err)
			}
			if ev := drainEvents(recorder); !strings.Contains(ev, "Warning RestoreFailed") || !strings.Contains(ev, "target.cluster.auth.rootSecretName") {
				t.Errorf("events %q, want a Warning RestoreFailed with the fix", ev)
			}
		})
	}
}

// A restore is refused for authentication only when a snapshot it may restore is recorded as
// taken with it on and the target has no auth. A target with auth is restored into whatever the
// snapshot's authentication: on, the operator logs in with root's password
// (TestARestoredClusterWithAuthInItsDataServes); off, it turns authentication on itself
// (TestARestoredClusterWithoutAuthInItsDataHasItTurnedOn). A snapshot not known either way (a
// record from before it was recorded) is restored as before: a cluster that then refuses the
// operator says so (TestEtcdRefusingTheOperatorsUserIsReportedWithTheFix). An older snapshot
// the restore may fall back to counts too.
func TestARestoreIsRefusedForAuthOnlyWhenASnapshotHasItAndTheTargetNot(t *testing.T) {
	withAuth := &etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16", Auth: &etcdv1alpha1.AuthSpec{RootSecretName: "root"}}
	withoutAuth := &etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16"}
	for name, tc := range map[string]struct {
		snapshot, older *bool
		target          *etcdv1alpha1.EtcdClusterSpec
		refused         bool
	}{
		"snapshot with auth, target with auth":        {on(), nil, withAuth, false},
		"snapshot without auth, target with auth":     {off(), nil, withAuth, false},
		"snapshot without auth, target without":       {off(), nil, withoutAuth, false},
		"snapshot not known, target without":          {nil, nil, withoutAuth, false},
		"an older snapshot with auth, target without": {off(), on(), withoutAuth, true},
	} {
		t.Run(name, func(t *testing.T) {
			backup := hourlyOfC(tc.snapshot)
			if tc.older != nil {
				older := completedBackup("hourly", "c", 0, 500).Status.LastBackup
				older.URI, older.AuthEnabled = "pvc://backups/hourly-older.db", tc.older
				backup.Status.History = []etcdv1alpha1.BackupRun{{Phase: etcdv1alpha1.BackupCompleted, Artifact: backup.Status.LastBackup},
					{Phase: etcdv1alpha1.BackupCompleted, Artifact: older}}
			}
			r, k8s := restoreReconciler(t, restoreOfHourly(tc.target), backup)
			got := reconcileRestore(t, r, restoreOfHourly(tc.target))
			created := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "copy"}, &etcdv1alpha1.EtcdCluster{}) == nil
			if refused := got.Status.Phase == etcdv1alpha1.RestoreFailed; refused != tc.refused || created == tc.refused {
				t.Fatalf("restore %s (%s), EtcdCluster copy created %t; want refused %t", got.Status.Phase, failureOf(got), created, tc.refused)
			}
			if tc.refused && !strings.Contains(failureOf(got), "pvc://backups/hourly-older.db") {
				t.Fatalf("the refusal %q does not name the older snapshot, the one with authentication", failureOf(got))
			}
		})
	}
}

// An in-place restore of a snapshot with authentication into a cluster without spec.auth is
// refused before anything is staged: the cluster would be locked against the operator once cut
// over. The fix is spec.auth on the cluster first.
func TestAnInPlaceRestoreOfASnapshotWithAuthIntoAClusterWithoutAuthIsRefused(t *testing.T) {
	rs := inPlaceRestore("back")
	rs.Spec.Source = etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "hourly"}}
	r, k8s := restoreReconciler(t, rs, formedCluster(nil), hourlyOfC(on()))
	got := reconcileRestore(t, r, rs)
	if cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded); got.Status.Phase != etcdv1alpha1.RestoreFailed ||
		cond == nil || cond.Reason != etcdv1alpha1.ReasonAuthRequired || !strings.Contains(cond.Message, "Set spec.auth.rootSecretName on EtcdCluster c") {
		t.Fatalf("restore %s, Succeeded %+v; want it Failed, AuthRequired, naming spec.auth of EtcdCluster c", got.Status.Phase, cond)
	}
	jobs := &batchv1.JobList{}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := k8s.List(t.Context(), jobs); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("restore Jobs %d (%v), want none", len(jobs.Items), err)
	}
	if err := k8s.List(t.Context(), claims); err != nil || len(claims.Items) != 0 {
		t.Fatalf("claims %d (%v), want none staged", len(claims.Items), err)
	}
}

// A new cluster restored from a snapshot with authentication on, with spec.auth, serves: the
// operator's first login works with the Secret's password when it is root's of the snapshot's
// time, and with a password from the record the restore carried from the backed-up cluster
// when the Secret has a newer one (which the operator then sets).
func TestARestoredClusterWithAuthInItsDataServes(t *testing.T) {
	carried := &resources.RootRecord{History: []resources.RootPasswordSet{passwordSet("now", 1), passwordSet("at-backup", 10)}}
	for name, tc := range map[string]struct {
		secret string
		record *resources.RootRecord
	}{
		"the Secret holds root's password of then":             {"at-backup", nil},
		"the Secret holds today's, the record the one of then": {"now", carried},
	} {
		t.Run(name, func(t *testing.T) {
			a := newAuthCluster(t, tc.secret, tc.record, true, "at-backup")
			got := a.reconcile(t, 3)
			if !meta.IsStatusConditionTrue(got.Status.Conditions, etcdv1alpha1.ConditionAvailable) || degradedReason(got) != "" {
				t.Fatalf("conditions %+v, want Available and not Degraded", got.Status.Conditions)
			}
			if pw := a.etcd.Password(); pw != tc.secret {
				t.Fatalf("etcd's root password is %q, want the Secret's (calls %v)", pw, a.etcd.Calls)
			}
			if rec := a.record(t); rec.Password != tc.secret || !rec.HasSet("at-backup") {
				t.Fatalf("record %+v, want the Secret's password, and the one of then in the history", rec)
			}
		})
	}
}

// A new cluster with spec.auth restored from a snapshot taken without authentication has it
// turned on by the operator, with the Secret's password, as any cluster with spec.auth: the
// passwords the restore carried from the backed-up cluster change nothing.
func TestARestoredClusterWithoutAuthInItsDataHasItTurnedOn(t *testing.T) {
	a := newAuthCluster(t, "wanted", &resources.RootRecord{History: []resources.RootPasswordSet{passwordSet("at-backup", 10)}}, false, "")
	got := a.reconcile(t, 3)
	if !a.etcd.AuthEnabled || a.etcd.Password() != "wanted" || !slices.Contains(a.etcd.Calls, "EnableAuth") {
		t.Fatalf("auth %t with password %q (calls %v), want it on with the Secret's", a.etcd.AuthEnabled, a.etcd.Password(), a.etcd.Calls)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, etcdv1alpha1.ConditionAvailable) || degradedReason(got) != "" {
		t.Fatalf("conditions %+v, want Available and not Degraded", got.Status.Conditions)
	}
}

// A restore waiting for its cluster to serve says why when the cluster reports that etcd
// refuses the operator (a snapshot whose record did not say it had authentication on): the
// cluster's reason and fix, not only a count of ready members, from the first look rather
// than after 15 minutes.
func TestARestoreWaitingOnAClusterThatRefusesTheOperatorSaysWhy(t *testing.T) {
	rs := restoreOfHourly(&etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16"})
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, StartTime: ptrTime(time.Now()), RestoredRevision: ptr.To[int64](700),
		InstallTime: ptrTime(time.Now().Add(-time.Minute))}
	target := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: "ns", UID: "copy-uid", Annotations: map[string]string{resources.AnnotationRestoredBy: rs.Name}},
		Spec:       *rs.Spec.Target.Cluster,
		Status: etcdv1alpha1.EtcdClusterStatus{Conditions: []metav1.Condition{
			{Type: etcdv1alpha1.ConditionAvailable, Status: metav1.ConditionUnknown, Reason: etcdv1alpha1.ReasonAuthRequired, Message: "the operator cannot reach etcd", LastTransitionTime: metav1.Now()},
			{Type: etcdv1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: etcdv1alpha1.ReasonAuthRequired,
				Message: "etcd has authentication on and refuses the operator: set spec.auth.rootSecretName", LastTransitionTime: metav1.Now()}}},
	}
	r, _ := restoreReconciler(t, rs, target, hourlyOfC(nil))
	got := reconcileRestore(t, r, rs)
	cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
	if cond == nil || cond.Reason != etcdv1alpha1.ReasonRestoring || !strings.Contains(cond.Message, "AuthRequired") ||
		!strings.Contains(cond.Message, "set spec.auth.rootSecretName") {
		t.Fatalf("Succeeded %+v, want Restoring with the cluster's AuthRequired and its fix", cond)
	}
}
