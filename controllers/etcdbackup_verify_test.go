package controllers

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// completedRuns is a history of n completed runs, newest first; verified says which (by index)
// had their snapshot verified.
func completedRuns(n int, verified ...int) []etcdv1alpha1.BackupRun {
	runs := make([]etcdv1alpha1.BackupRun, n)
	for i := range runs {
		runs[i] = etcdv1alpha1.BackupRun{Phase: etcdv1alpha1.BackupCompleted, Job: fmt.Sprintf("run-%d", n-i),
			Artifact: &etcdv1alpha1.BackupArtifact{URI: fmt.Sprintf("pvc://backups/s-%d.db", n-i)}}
	}
	for _, i := range verified {
		runs[i].Artifact.Verification = &etcdv1alpha1.SnapshotVerification{Result: etcdv1alpha1.SnapshotVerified}
	}
	return runs
}

func TestSnapshotToVerifyFollowsThePolicy(t *testing.T) {
	always := &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyAlways}
	never := &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyNever}
	every3 := &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyEveryNthRun, EveryNthRun: 3}
	failedRun := etcdv1alpha1.BackupRun{Phase: etcdv1alpha1.BackupFailed, Job: "run-failed"}
	for _, tc := range []struct {
		name    string
		verify  *etcdv1alpha1.BackupVerification
		history []etcdv1alpha1.BackupRun
		want    string // the run's Job, or "" for none
	}{
		{"no verify", nil, completedRuns(1), ""},
		{"never", never, completedRuns(1), ""},
		{"always, newest not verified", always, completedRuns(2, 1), "run-2"},
		{"always, newest already verified", always, completedRuns(2, 0), ""},
		{"always, the newest run failed", always, append([]etcdv1alpha1.BackupRun{failedRun}, completedRuns(1)...), "run-1"},
		{"no completed run", always, []etcdv1alpha1.BackupRun{failedRun}, ""},
		{"every 3rd, first run", every3, completedRuns(1), "run-1"},
		{"every 3rd, 2nd run after a verified one", every3, completedRuns(2, 1), ""},
		{"every 3rd, 3rd run after a verified one", every3, completedRuns(3, 2), ""},
		{"every 3rd, 4th run after a verified one", every3, completedRuns(4, 3), "run-4"},
		{"every 3rd, none verified in the history", every3, completedRuns(5), "run-5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &etcdv1alpha1.EtcdBackup{Spec: etcdv1alpha1.EtcdBackupSpec{Verify: tc.verify}, Status: etcdv1alpha1.EtcdBackupStatus{History: tc.history}}
			got := ""
			if run := snapshotToVerify(b); run != nil {
				got = run.Job
			}
			if got != tc.want {
				t.Fatalf("verifies %q, want %q", got, tc.want)
			}
		})
	}
}

// verifyScene is a backup whose newest run's snapshot a verify Job has just checked, its pod
// ending with the given container states.
func verifyScene(t *testing.T, succeeded bool, states map[string]corev1.ContainerStateTerminated) (*EtcdBackupReconciler, client.Client, *events.FakeRecorder, *etcdv1alpha1.EtcdBackup) {
	t.Helper()
	now := time.Now()
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "backup-uid", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "c", Verify: &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyAlways},
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
		Status: etcdv1alpha1.EtcdBackupStatus{History: completedRuns(2)},
	}
	backup.Status.LastBackup = backup.Status.History[0].Artifact.DeepCopy()
	condition := batchv1.JobComplete
	if !succeeded {
		condition = batchv1.JobFailed
	}
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "run-2-verify", Namespace: "ns", UID: "job-uid",
			Labels:      map[string]string{resources.LabelBackup: "nightly", resources.LabelVerify: "run-2"},
			Annotations: map[string]string{resources.AnnotationSnapshotURI: backup.Status.LastBackup.URI}},
		Status: batchv1.JobStatus{CompletionTime: ptrTime(now), Conditions: []batchv1.JobCondition{{Type: condition, Status: corev1.ConditionTrue}}},
	}
	if err := ctrl.SetControllerReference(backup, job, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "run-2-verify-pod", Namespace: "ns", Labels: map[string]string{batchv1.JobNameLabel: job.Name}}}
	for name, st := range states {
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &st}})
	}
	if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(backup, job, pod).WithStatusSubresource(backup).Build()
	recorder := events.NewFakeRecorder(20)
	return &EtcdBackupReconciler{Client: k8s, APIReader: k8s, Recorder: recorder, Now: time.Now}, k8s, recorder, backup
}

func terminatedWith(report agent.Report, exitCode int32, start, end time.Time) corev1.ContainerStateTerminated {
	return corev1.ContainerStateTerminated{Message: string(report.Encode()), ExitCode: exitCode, StartedAt: metav1.NewTime(start), FinishedAt: metav1.NewTime(end)}
}

// The outcome of a verify Job goes on the snapshot it verified, wherever status names it, into
// status.lastVerified with the measured restore time, into the Verified condition and an
// event; then the Job is deleted. A snapshot corrupted after upload is a Warning event naming
// it; a destination the Job cannot read is not held against the snapshot.
func TestVerificationOutcomeIsRecordedOnTheSnapshot(t *testing.T) {
	t0 := time.Now().Add(-time.Minute).Truncate(time.Second)
	good := map[string]corev1.ContainerStateTerminated{
		resources.VerifyFetchContainer:   terminatedWith(agent.Report{Restore: &agent.RestoreResult{}}, 0, t0, t0.Add(time.Second)),
		resources.VerifyEtcdutlContainer: {ExitCode: 0, StartedAt: metav1.NewTime(t0.Add(time.Second)), FinishedAt: metav1.NewTime(t0.Add(3 * time.Second))},
		resources.VerifyContainer: terminatedWith(agent.Report{Verify: &agent.VerifyResult{Revision: 51, KeyCount: 50, HashCompared: true}}, 0,
			t0.Add(3*time.Second), t0.Add(8*time.Second)),
	}
	corrupt := map[string]corev1.ContainerStateTerminated{
		resources.VerifyFetchContainer: terminatedWith(agent.Report{Error: "pvc://backups/s-2.db is 10 bytes with sha256 x, not the recorded y", Permanent: true, Unrestorable: true}, 2, t0, t0),
	}
	unreadable := map[string]corev1.ContainerStateTerminated{
		resources.VerifyFetchContainer: terminatedWith(agent.Report{Error: "open s-2.db: AccessDenied", Permanent: true}, 2, t0, t0),
	}
	restoreFails := map[string]corev1.ContainerStateTerminated{
		resources.VerifyFetchContainer:   terminatedWith(agent.Report{Restore: &agent.RestoreResult{}}, 0, t0, t0),
		resources.VerifyEtcdutlContainer: {ExitCode: 1, Message: "snapshot file integrity check failed", StartedAt: metav1.NewTime(t0), FinishedAt: metav1.NewTime(t0)},
	}
	for _, tc := range []struct {
		name      string
		succeeded bool
		states    map[string]corev1.ContainerStateTerminated
		result    etcdv1alpha1.VerificationResult
		condition metav1.ConditionStatus
		reason    string
		event     string
	}{
		{"verified", true, good, etcdv1alpha1.SnapshotVerified, metav1.ConditionTrue, etcdv1alpha1.ReasonSnapshotVerified, "Normal SnapshotVerified"},
		{"corrupted in the destination", false, corrupt, etcdv1alpha1.SnapshotFailed, metav1.ConditionFalse, etcdv1alpha1.ReasonVerificationFailed, "Warning VerificationFailed"},
		{"etcdutl refuses it", false, restoreFails, etcdv1alpha1.SnapshotFailed, metav1.ConditionFalse, etcdv1alpha1.ReasonVerificationFailed, "Warning VerificationFailed"},
		{"destination unreadable", false, unreadable, etcdv1alpha1.SnapshotNotVerified, metav1.ConditionFalse, etcdv1alpha1.ReasonVerificationNotRun, "Warning VerificationNotRun"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, k8s, recorder, backup := verifyScene(t, tc.succeeded, tc.states)
			if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)}); err != nil {
				t.Fatal(err)
			}
			got := &etcdv1alpha1.EtcdBackup{}
			if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(backup), got); err != nil {
				t.Fatal(err)
			}
			uri := backup.Status.LastBackup.URI
			for where, a := range map[string]*etcdv1alpha1.BackupArtifact{"lastBackup": got.Status.LastBackup, "history[0]": got.Status.History[0].Artifact} {
				if a.Verification == nil || a.Verification.Result != tc.result {
					t.Errorf("%s verification %+v, want %s", where, a.Verification, tc.result)
				}
			}
			if got.Status.History[1].Artifact.Verification != nil {
				t.Errorf("the older snapshot, not verified, is marked %+v", got.Status.History[1].Artifact.Verification)
			}
			lv := got.Status.LastVerified
			if lv == nil || lv.URI != uri || lv.Result != tc.result {
				t.Fatalf("lastVerified %+v", lv)
			}
			if tc.result == etcdv1alpha1.SnapshotVerified && (lv.Revision != 51 || lv.Duration == nil || lv.Duration.Duration != 7*time.Second) {
				t.Errorf("lastVerified %+v, want revision 51 and the restore and check's 7s", lv)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionVerified)
			if cond == nil || cond.Status != tc.condition || cond.Reason != tc.reason || !strings.Contains(cond.Message, uri) {
				t.Errorf("Verified condition %+v, want %s %s naming %s", cond, tc.condition, tc.reason, uri)
			}
			if evs := drainEvents(recorder); !strings.Contains(evs, tc.event) || !strings.Contains(evs, uri) {
				t.Errorf("events %q, want %q naming %s", evs, tc.event, uri)
			}
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "run-2-verify"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
				t.Errorf("the recorded verify Job: %v, want it deleted", err)
			}
		})
	}
}

// backupWithAFailedNewest is an EtcdBackup of cluster c whose newest snapshot failed
// verification and whose one before did not.
func backupWithAFailedNewest(now time.Time) *etcdv1alpha1.EtcdBackup {
	b := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns"},
		Spec:       etcdv1alpha1.EtcdBackupSpec{ClusterName: "c", Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
		Status:     etcdv1alpha1.EtcdBackupStatus{History: completedRuns(3)},
	}
	for i := range b.Status.History {
		b.Status.History[i].Artifact.StartTime = metav1.NewTime(now.Add(-time.Duration(i) * time.Hour))
		b.Status.History[i].Artifact.Revision = int64(100 - i)
	}
	b.Status.History[0].Artifact.Verification = &etcdv1alpha1.SnapshotVerification{Result: etcdv1alpha1.SnapshotFailed, Message: "sha256 differs"}
	b.Status.LastBackup = b.Status.History[0].Artifact.DeepCopy()
	return b
}

// A restore that names the backup without a snapshot gets the newest that did not fail
// verification, and never falls back to one that did; one that names a failed snapshot is
// refused with a reason of its own, before anything is made.
func TestRestoreNeverPicksASnapshotThatFailedVerification(t *testing.T) {
	b := backupWithAFailedNewest(time.Now())
	failedURI, goodURI := b.Status.History[0].Artifact.URI, b.Status.History[1].Artifact.URI
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(b).Build()
	r := &EtcdRestoreReconciler{Client: k8s, APIReader: k8s}
	restoreOf := func(uri string) *etcdv1alpha1.EtcdRestore {
		return &etcdv1alpha1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns"},
			Spec: etcdv1alpha1.EtcdRestoreSpec{Source: etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "nightly", URI: uri}}}}
	}

	src, err := r.resolveSource(t.Context(), restoreOf(""))
	if err != nil || src.uri != goodURI {
		t.Fatalf("latest snapshot: %q, %v; want %s, not %s which failed verification", src.uri, err, goodURI, failedURI)
	}
	for _, f := range src.Fallbacks {
		if strings.HasSuffix(failedURI, f.Key) {
			t.Fatalf("falls back to %s, which failed verification", failedURI)
		}
	}
	// Named, the snapshot that failed verification is refused.
	_, err = r.resolveSource(t.Context(), restoreOf(failedURI))
	var failure *restoreFailure
	if !errors.As(err, &failure) || failure.reason != etcdv1alpha1.ReasonSnapshotFailedVerification || !strings.Contains(failure.message, failedURI) {
		t.Fatalf("restore naming a snapshot that failed verification: %v; want it refused as %s", err, etcdv1alpha1.ReasonSnapshotFailedVerification)
	}
}

// Quorum-loss recovery's FromLatestBackup goes by the newest snapshot that did not fail
// verification: another backup's older but sound snapshot wins over a newer failed one, and
// the recovery's record names the sound snapshot.
func TestFromLatestBackupSkipsASnapshotThatFailedVerification(t *testing.T) {
	now := time.Now()
	failedNewest := backupWithAFailedNewest(now)
	other := backupWithAFailedNewest(now.Add(-30 * time.Minute))
	other.Name = "hourly"
	other.Status.History[0].Artifact.Verification = nil
	other.Status.LastBackup = other.Status.History[0].Artifact.DeepCopy()
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(failedNewest, other).Build()
	r := &EtcdClusterReconciler{Client: k8s}
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}

	latest, err := r.latestBackup(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if latest == nil || latest.Name != "hourly" {
		t.Fatalf("latest backup %v, want hourly: nightly's newest snapshot failed verification and its next is older", latest)
	}
	// Alone, the backup whose newest failed is still chosen, by its newest sound snapshot.
	if got := newestRestorable(failedNewest, ""); got == nil || got.URI != failedNewest.Status.History[1].Artifact.URI {
		t.Fatalf("newest restorable snapshot %+v, want the one before the failed one", got)
	}
}

// Snapshots of an earlier EtcdCluster of the same name (another UID) are neither the newest of
// the cluster's nor a fallback for one of its snapshots; those recorded with no UID may be.
func TestSnapshotsOfAnEarlierClusterOfTheSameNameAreNotItsOwn(t *testing.T) {
	at := func(minute int, uid types.UID) *etcdv1alpha1.BackupArtifact {
		return &etcdv1alpha1.BackupArtifact{URI: fmt.Sprintf("pvc://b/%d.db", minute), ClusterUID: uid,
			StartTime: metav1.NewTime(time.Date(2026, 11, 28, 12, minute, 0, 0, time.UTC))}
	}
	b := &etcdv1alpha1.EtcdBackup{Status: etcdv1alpha1.EtcdBackupStatus{LastBackup: at(50, "earlier"), History: []etcdv1alpha1.BackupRun{
		{Artifact: at(50, "earlier")}, {Artifact: at(40, "now")}, {Artifact: at(30, "earlier")}, {Artifact: at(20, "")}, {Artifact: at(10, "now")}}}}
	if got := newestRestorable(b, "now"); got == nil || got.URI != "pvc://b/40.db" {
		t.Errorf("newest of cluster now: %+v, want 40.db", got)
	}
	if got := newestRestorable(b, ""); got == nil || got.URI != "pvc://b/50.db" {
		t.Errorf("newest of any cluster: %+v, want 50.db", got)
	}
	var uris []string
	for _, a := range olderArtifacts(b, at(45, "now")) {
		uris = append(uris, a.URI)
	}
	if want := []string{"pvc://b/40.db", "pvc://b/20.db", "pvc://b/10.db"}; !slices.Equal(uris, want) {
		t.Errorf("fallbacks of a snapshot of cluster now: %v, want %v", uris, want)
	}
}

// A verify Job's recovery time runs from its fetch's start to the restored member's first
// answer, both timed by the agent; etcdutl's step is its container's, to the second. Without
// either end, or with ends out of order (reports of two pods), there is none: never a guess.
func TestRecoveryTimeComesFromTheFetchAndTheVerifiersReports(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	began := t0.Add(300 * time.Millisecond)
	fetch := agent.Report{Began: began, Ended: began.Add(1200 * time.Millisecond)}
	answeredAfter := func(d time.Duration) agent.Report {
		return agent.Report{Verify: &agent.VerifyResult{AnsweredAt: began.Add(d)}}
	}
	etcdutl := corev1.ContainerStateTerminated{StartedAt: metav1.NewTime(t0.Add(2 * time.Second)), FinishedAt: metav1.NewTime(t0.Add(5 * time.Second))}
	ms := func(n int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(n) * time.Millisecond} }
	for _, tc := range []struct {
		name    string
		fetch   agent.Report
		restore corev1.ContainerStateTerminated
		check   agent.Report
		want    *metav1.Duration
		steps   *etcdv1alpha1.RecoverySteps
	}{
		{"every part", fetch, etcdutl, answeredAfter(6500 * time.Millisecond), ms(6500),
			&etcdv1alpha1.RecoverySteps{Fetch: ms(1200), Restore: ms(3000), StartUp: ms(2000)}},
		{"etcdutl's container not seen", fetch, corev1.ContainerStateTerminated{}, answeredAfter(6500 * time.Millisecond), ms(6500),
			&etcdv1alpha1.RecoverySteps{Fetch: ms(1200)}},
		{"the member never answered", fetch, etcdutl, agent.Report{Error: "did not answer"}, nil, nil},
		{"a fetch that reported no start", agent.Report{}, etcdutl, answeredAfter(6500 * time.Millisecond), nil, nil},
		{"an answer before the fetch began", fetch, etcdutl, answeredAfter(-time.Second), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, steps := recoveryTime(tc.fetch, tc.restore, tc.check)
			if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(steps, tc.steps) {
				t.Errorf("recovery time %v, steps %+v; want %v, %+v", got, steps, tc.want, tc.steps)
			}
		})
	}
}
