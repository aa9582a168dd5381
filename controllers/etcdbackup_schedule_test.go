package controllers

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// The run decision with an injected clock: no goroutine per schedule, at most one catch-up.
func TestNextRun(t *testing.T) {
	created := time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)
	at := func(h, m int) time.Time { return time.Date(2026, 11, 22, h, m, 0, 0, time.UTC) }
	for _, tc := range []struct {
		name         string
		schedule     string
		lastSchedule time.Time
		history      int
		now          time.Time
		wantRun      time.Time
		wantWait     time.Duration
		wantPhase    etcdv1alpha1.BackupPhase
	}{
		{name: "one-shot runs at once", now: at(10, 16), wantRun: created},
		{name: "one-shot never runs twice", history: 1, now: at(10, 16), wantPhase: etcdv1alpha1.BackupFailed},
		{name: "hourly waits for the hour", schedule: "0 * * * *", now: at(10, 30), wantWait: 30*time.Minute + 100*time.Millisecond, wantPhase: etcdv1alpha1.BackupScheduled},
		{name: "hourly runs on the hour", schedule: "0 * * * *", now: at(11, 0), wantRun: at(11, 0)},
		{name: "downtime: one catch-up for the latest missed run", schedule: "0 * * * *", lastSchedule: at(5, 0), now: at(10, 30), wantRun: at(10, 0)},
		{name: "after a run, the next", schedule: "0 * * * *", lastSchedule: at(10, 0), now: at(10, 0).Add(5 * time.Second), wantWait: time.Hour - 5*time.Second + 100*time.Millisecond, wantPhase: etcdv1alpha1.BackupScheduled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &etcdv1alpha1.EtcdBackup{
				ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
				Spec:       etcdv1alpha1.EtcdBackupSpec{Schedule: tc.schedule},
			}
			if !tc.lastSchedule.IsZero() {
				b.Status.LastScheduleTime = ptrTime(tc.lastSchedule)
			}
			for range tc.history {
				b.Status.History = append(b.Status.History, etcdv1alpha1.BackupRun{Phase: etcdv1alpha1.BackupFailed})
			}
			r := &EtcdBackupReconciler{Now: func() time.Time { return tc.now }}
			run, wait := r.nextRun(b)
			if !run.Equal(tc.wantRun) || wait != tc.wantWait || b.Status.Phase != tc.wantPhase {
				t.Errorf("run %v wait %v phase %q; want %v, %v, %q", run, wait, b.Status.Phase, tc.wantRun, tc.wantWait, tc.wantPhase)
			}
		})
	}
}

// A scheduled backup whose reconciler's clock jumps (downtime, a node's clock corrected): a
// jump forward over several runs starts one catch-up, for the latest missed time, then the
// schedule goes on from there; a jump back starts nothing for a time already run.
func TestScheduleAfterTheClockJumps(t *testing.T) {
	at := func(day, h, m int) time.Time { return time.Date(2026, 11, day, h, m, 0, 0, time.UTC) }
	s := newScheduleFixture(t, "0 * * * *", at(22, 9, 30))

	s.runAt(t, at(22, 10, 0))
	s.finishAt(t, at(22, 10, 1))
	s.expectRuns(t, at(22, 10, 0))

	s.runAt(t, at(22, 15, 30)) // five runs missed: 11:00 to 15:00
	s.runAt(t, at(22, 15, 31)) // the catch-up still runs: nothing more starts
	s.finishAt(t, at(22, 15, 32))
	if wait := s.runAt(t, at(22, 15, 40)); wait != 20*time.Minute+100*time.Millisecond {
		t.Errorf("after the catch-up, the next run is awaited for %v, want until 16:00", wait)
	}
	s.runAt(t, at(22, 16, 0))
	s.finishAt(t, at(22, 16, 1))
	s.expectRuns(t, at(22, 10, 0), at(22, 15, 0), at(22, 16, 0))

	s.runAt(t, at(22, 16, 0)) // back to the time of the run just made
	s.runAt(t, at(22, 13, 20))
	s.expectRuns(t, at(22, 10, 0), at(22, 15, 0), at(22, 16, 0))
	s.runAt(t, at(22, 17, 0))
	s.expectRuns(t, at(22, 10, 0), at(22, 15, 0), at(22, 16, 0), at(22, 17, 0))
}

// The most frequent schedule allowed, and a jump of weeks: still one catch-up, not one per
// however many runs the walk over missed times was bounded to.
func TestScheduleAfterALongJumpOnAFrequentSchedule(t *testing.T) {
	start := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	s := newScheduleFixture(t, "@every 10s", start)
	s.runAt(t, start.Add(10*time.Second))
	s.finishAt(t, start.Add(15*time.Second))

	later := start.Add(30 * 24 * time.Hour)
	s.runAt(t, later)
	s.expectRuns(t, start.Add(10*time.Second), later)
	s.finishAt(t, later.Add(5*time.Second))
	wait := s.runAt(t, later.Add(6*time.Second))
	s.expectRuns(t, start.Add(10*time.Second), later)
	if wait <= 0 || wait > 10*time.Second {
		t.Errorf("after the catch-up, the next run is awaited for %v, want the next 10 s slot", wait)
	}
}

// scheduleFixture is a scheduled EtcdBackup of an Available cluster, reconciled by the real
// reconciler against the fake client with an injected clock; the test plays the Job
// controller and the kubelet.
type scheduleFixture struct {
	k8s     client.Client
	r       *EtcdBackupReconciler
	backup  *etcdv1alpha1.EtcdBackup
	now     time.Time
	started []string // the Jobs the reconciler asked to create, in order
}

func newScheduleFixture(t *testing.T, schedule string, created time.Time) *scheduleFixture {
	t.Helper()
	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "cluster-uid"},
		Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16"},
		Status: etcdv1alpha1.EtcdClusterStatus{Conditions: []metav1.Condition{
			{Type: etcdv1alpha1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: etcdv1alpha1.ReasonQuorumHealthy}}},
	}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "backups", Namespace: "ns"}}
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "sched", Namespace: "ns", UID: "backup-uid", CreationTimestamp: metav1.NewTime(created)},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "c", Schedule: schedule,
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
	}
	s := &scheduleFixture{backup: backup}
	s.k8s = fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cluster, claim, backup).WithStatusSubresource(backup).
		WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*batchv1.Job); ok {
				s.started = append(s.started, obj.GetName())
			}
			return c.Create(ctx, obj, opts...)
		}}).Build()
	s.r = &EtcdBackupReconciler{Client: s.k8s, APIReader: s.k8s, AgentImage: "registry.test/etcd-operator:test",
		Now: func() time.Time { return s.now }}
	return s
}

// runAt reconciles at now, and starts the pod of any Job made; it returns when the reconciler
// asked to look again.
func (s *scheduleFixture) runAt(t *testing.T, now time.Time) time.Duration {
	t.Helper()
	s.now = now
	result, err := s.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s.backup)})
	if err != nil {
		t.Fatalf("reconcile at %v: %v", now, err)
	}
	s.playJobs(t, false)
	return result.RequeueAfter
}

// finishAt completes the Jobs running, each with its agent's report, and reconciles at now,
// which records their runs.
func (s *scheduleFixture) finishAt(t *testing.T, now time.Time) {
	t.Helper()
	s.now = now
	s.playJobs(t, true)
	s.runAt(t, now)
	if b := s.get(t); b.Status.ActiveJob != "" {
		t.Fatalf("at %v, Job %s still runs", now, b.Status.ActiveJob)
	}
}

// playJobs gives every Job a running pod; with finish, the Job completes and its pod leaves the
// agent's report.
func (s *scheduleFixture) playJobs(t *testing.T, finish bool) {
	t.Helper()
	ctx := t.Context()
	jobs := &batchv1.JobList{}
	if err := s.k8s.List(ctx, jobs, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	for i := range jobs.Items {
		job := &jobs.Items[i]
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-pod", Namespace: "ns", Labels: map[string]string{batchv1.JobNameLabel: job.Name}}}
		if err := s.k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); apierrors.IsNotFound(err) {
			if err := ctrl.SetControllerReference(job, pod, s.k8s.Scheme()); err != nil {
				t.Fatal(err)
			}
			if err := s.k8s.Create(ctx, pod); err != nil {
				t.Fatal(err)
			}
			pod.Status.Phase = corev1.PodRunning
			if err := s.k8s.Status().Update(ctx, pod); err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		if !finish {
			continue
		}
		report := agent.Report{Backup: &agent.BackupResult{URI: "pvc://backups/" + job.Name + ".db", SizeBytes: 10, SHA256: "abc", Revision: 7}}
		pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: resources.BackupContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(report.Encode())}}}}}
		job.Status = batchv1.JobStatus{CompletionTime: ptrTime(s.now),
			Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
		if err := errors.Join(s.k8s.Status().Update(ctx, pod), s.k8s.Status().Update(ctx, job)); err != nil {
			t.Fatal(err)
		}
	}
}

// expectRuns checks that the reconciler started Jobs for exactly these scheduled times, and
// that each run is recorded.
func (s *scheduleFixture) expectRuns(t *testing.T, scheduled ...time.Time) {
	t.Helper()
	var want []string
	for _, at := range scheduled {
		want = append(want, resources.BackupJobName(s.backup.Name, at))
	}
	if !slices.Equal(s.started, want) {
		t.Fatalf("at %v, Jobs started %v, want %v", s.now, s.started, want)
	}
	if b := s.get(t); len(b.Status.History) != len(scheduled) && b.Status.ActiveJob == "" {
		t.Fatalf("at %v, %d runs recorded, want %d", s.now, len(b.Status.History), len(scheduled))
	}
}

func (s *scheduleFixture) get(t *testing.T) *etcdv1alpha1.EtcdBackup {
	t.Helper()
	b := &etcdv1alpha1.EtcdBackup{}
	if err := s.k8s.Get(t.Context(), client.ObjectKeyFromObject(s.backup), b); err != nil {
		t.Fatal(err)
	}
	return b
}
