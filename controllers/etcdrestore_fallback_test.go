package controllers

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// nightlyWithThreeSnapshots is an EtcdBackup whose status names three snapshots an hour apart,
// status.lastBackup and two older ones in its history, and a run whose snapshot retention
// deleted.
func nightlyWithThreeSnapshots() (*etcdv1alpha1.EtcdBackup, []*etcdv1alpha1.BackupArtifact) {
	b := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "backup-uid"},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "c",
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
	}
	var artifacts []*etcdv1alpha1.BackupArtifact // newest first
	for h := 3; h > 0; h-- {
		at := time.Date(2026, 3, 1, h, 0, 0, 0, time.UTC)
		a := &etcdv1alpha1.BackupArtifact{URI: fmt.Sprintf("pvc://backups/ns/c/nightly_backup-uid/%s-r%d.db", at.Format("20060102T150405Z"), h),
			SHA256: strings.Repeat(fmt.Sprint(h), 64), Revision: int64(h), EtcdVersion: "3.6.16", StartTime: metav1.NewTime(at), CompletionTime: metav1.NewTime(at)}
		artifacts = append(artifacts, a)
		b.Status.History = append(b.Status.History, etcdv1alpha1.BackupRun{Phase: etcdv1alpha1.BackupCompleted, Artifact: a})
	}
	b.Status.History = append(b.Status.History, etcdv1alpha1.BackupRun{Phase: etcdv1alpha1.BackupCompleted,
		Message: "retention deleted its snapshot pvc://backups/ns/c/nightly_backup-uid/20260301T000000Z-r0.db after run nightly-x"})
	b.Status.LastBackup = artifacts[0]
	return b, artifacts
}

// A restore of an EtcdBackup's snapshot falls back to the newest older snapshot its status
// names that still exists, should that one be gone (a user or a bucket's lifecycle rule deleted
// it): its Job is given them, newest first, and fetches the first that exists; the restore
// then names the snapshot it restored and the missing one in status, says so in a Warning
// event and in its condition, to the end. Before, the Job was given only the one snapshot and
// the restore failed.
func TestRestoreOfAMissingSnapshotFallsBackToTheNewestOlderOne(t *testing.T) {
	backup, artifacts := nightlyWithThreeSnapshots()
	rs, c := inPlaceRestoreUnderWay("fallback")
	rs.Spec.Source = etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: backup.Name}}
	r, k8s := restoreReconciler(t, rs, c, backup)
	recorder := events.NewFakeRecorder(20)
	r.Recorder = recorder

	reconcileRestore(t, r, rs)
	job := restoreJobOf(t, k8s, rs)
	cfg := jobConfig(t, job)
	var tried []string
	for _, s := range append([]jobspec.Snapshot{{Key: cfg.Key, SHA256: cfg.SHA256}}, cfg.Fallbacks...) {
		tried = append(tried, "pvc://backups/"+s.Key+" "+s.SHA256)
	}
	var want []string
	for _, a := range artifacts {
		want = append(want, a.URI+" "+a.SHA256)
	}
	if !slices.Equal(tried, want) {
		t.Fatalf("the restore Job tries\n  %s\nwant the backup's snapshots, newest first:\n  %s", strings.Join(tried, "\n  "), strings.Join(want, "\n  "))
	}

	// The newest is gone: the Job restored the one before it.
	missing, fetched := artifacts[0], artifacts[1]
	report := agent.Report{Restore: &agent.RestoreResult{URI: fetched.URI, SizeBytes: 1, SHA256: fetched.SHA256, Revision: fetched.Revision, Missing: missing.URI}}
	completeRestoreJob(t, k8s, job, report)
	got := reconcileRestore(t, r, rs)
	if got.Status.SnapshotURI != fetched.URI || got.Status.MissingSnapshotURI != missing.URI || ptr.Deref(got.Status.RestoredRevision, 0) != fetched.Revision {
		t.Fatalf("status names %s (missing %q) at revision %d, want the snapshot restored, %s at %d, and the missing %s",
			got.Status.SnapshotURI, got.Status.MissingSnapshotURI, ptr.Deref(got.Status.RestoredRevision, 0), fetched.URI, fetched.Revision, missing.URI)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded); cond == nil || !strings.Contains(cond.Message, missing.URI+" no longer exists") {
		t.Errorf("Succeeded %+v: want it to say the restore fell back", cond)
	}
	var said bool
	for len(recorder.Events) > 0 {
		e := <-recorder.Events
		said = said || (strings.Contains(e, "Warning SnapshotFallback") && strings.Contains(e, missing.URI) && strings.Contains(e, fetched.URI))
	}
	if !said {
		t.Errorf("no Warning event says the restore fell back from %s to %s", missing.URI, fetched.URI)
	}

	// Cut over, and the cluster serves the restored data: the restore completes, saying what
	// it restored, however the EtcdBackup's status has changed since.
	got = reconcileRestore(t, r, got)
	live := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), live); err != nil {
		t.Fatal(err)
	}
	live.Status.ClusterID = "new"
	if err := k8s.Status().Update(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	later := &etcdv1alpha1.EtcdBackup{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(backup), later); err != nil {
		t.Fatal(err)
	}
	later.Status.LastBackup = &etcdv1alpha1.BackupArtifact{URI: "pvc://backups/ns/c/nightly_backup-uid/20260301T040000Z-r4.db", StartTime: metav1.Now(), CompletionTime: metav1.Now()}
	if err := k8s.Update(t.Context(), later); err != nil {
		t.Fatal(err)
	}
	got = reconcileRestore(t, r, got)
	cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
	if got.Status.Phase != etcdv1alpha1.RestoreCompleted || got.Status.SnapshotURI != fetched.URI || got.Status.MissingSnapshotURI != missing.URI ||
		cond == nil || !strings.Contains(cond.Message, fetched.URI) || !strings.Contains(cond.Message, missing.URI) {
		t.Fatalf("phase %s, snapshot %s (missing %q), Succeeded %+v: want Completed, naming the snapshot restored and the missing one",
			got.Status.Phase, got.Status.SnapshotURI, got.Status.MissingSnapshotURI, cond)
	}
}

// jobConfig is the configuration the operator gave a backup or restore Job's agent.
func jobConfig(t *testing.T, job *batchv1.Job) jobspec.JobConfig {
	t.Helper()
	for _, c := range append(job.Spec.Template.Spec.InitContainers, job.Spec.Template.Spec.Containers...) {
		for _, env := range c.Env {
			if env.Name == jobspec.ConfigEnv {
				var cfg jobspec.JobConfig
				if err := json.Unmarshal([]byte(env.Value), &cfg); err != nil {
					t.Fatal(err)
				}
				return cfg
			}
		}
	}
	t.Fatalf("Job %s has no %s", job.Name, jobspec.ConfigEnv)
	return jobspec.JobConfig{}
}
