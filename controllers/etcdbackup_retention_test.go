package controllers

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Retention deletes a snapshot only once status no longer names it: recording a run releases
// from status the snapshots retention no longer keeps, and each Job is told every snapshot
// status names when it is made, which it never deletes. Before, each Job pruned what its own
// listing found surplus, status.lastBackup included, before its run was recorded; status kept
// naming deleted snapshots (status.history always, status.lastBackup until the record, or for
// good if the run's report was lost).
func TestRetentionDeletesOnlySnapshotsStatusNoLongerNames(t *testing.T) {
	created := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	s := newScheduleFixture(t, "@every 1h", created)
	b := s.get(t)
	b.Spec.Retention = &etcdv1alpha1.BackupRetention{MaxCount: ptr.To[int32](2)}
	if err := s.k8s.Update(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	var written []string // oldest first
	for run := 1; run <= 4; run++ {
		at := created.Add(time.Duration(run) * time.Hour)
		s.runAt(t, at)
		job := &batchv1.Job{}
		if err := s.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.BackupJobName("sched", at)}, job); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if keep, named := jobKeeps(t, job), namedSnapshots(s.get(t)); !slices.Equal(keep, named) {
			t.Fatalf("run %d: its Job keeps %v, but status names %v", run, keep, named)
		}
		uri := fmt.Sprintf("pvc://backups/ns/c/sched_backup-uid/%s-r%d.db", at.Format("20060102T150405Z"), run)
		written = append(written, uri)
		finishBackupJob(t, s, job, agent.BackupResult{URI: uri, SizeBytes: 10, SHA256: "abc", Revision: int64(run), StartTime: at, CompletionTime: at.Add(time.Second)})
		s.runAt(t, at.Add(time.Minute))
	}

	got := s.get(t)
	kept := written[len(written)-2:]
	if named := namedSnapshots(got); !slices.Equal(named, []string{kept[1], kept[0]}) {
		t.Fatalf("status names %v, want only the two retention keeps, newest first: %v", named, kept)
	}
	if got.Status.LastBackup == nil || got.Status.LastBackup.URI != kept[1] {
		t.Fatalf("lastBackup %+v, want %s", got.Status.LastBackup, kept[1])
	}
	for _, run := range got.Status.History[2:] {
		if run.Phase != etcdv1alpha1.BackupCompleted || run.Artifact != nil || !strings.Contains(run.Message, "retention") {
			t.Errorf("run %s, released to retention, reads %+v", run.Job, run)
		}
	}
}

// namedSnapshots are the URIs of the snapshots b's status names, newest first.
func namedSnapshots(b *etcdv1alpha1.EtcdBackup) []string {
	var uris []string
	if b.Status.LastBackup != nil {
		uris = append(uris, b.Status.LastBackup.URI)
	}
	for _, run := range b.Status.History {
		if run.Artifact != nil && !slices.Contains(uris, run.Artifact.URI) {
			uris = append(uris, run.Artifact.URI)
		}
	}
	return uris
}

// jobKeeps is what the agent of a backup Job is told never to delete.
func jobKeeps(t *testing.T, job *batchv1.Job) []string {
	t.Helper()
	for _, env := range job.Spec.Template.Spec.Containers[0].Env {
		if env.Name == jobspec.ConfigEnv {
			var cfg jobspec.JobConfig
			if err := json.Unmarshal([]byte(env.Value), &cfg); err != nil {
				t.Fatal(err)
			}
			return cfg.Keep
		}
	}
	t.Fatalf("Job %s has no %s", job.Name, jobspec.ConfigEnv)
	return nil
}

// finishBackupJob completes job, its pod leaving the agent's report of result.
func finishBackupJob(t *testing.T, s *scheduleFixture, job *batchv1.Job, result agent.BackupResult) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := s.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: job.Name + "-pod"}, pod); err != nil {
		t.Fatal(err)
	}
	report := agent.Report{Backup: &result}
	pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: resources.BackupContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(report.Encode())}}}}}
	if err := s.k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	job.Status = batchv1.JobStatus{StartTime: ptrTime(result.StartTime), CompletionTime: ptrTime(result.CompletionTime),
		Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
	if err := s.k8s.Status().Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
}
