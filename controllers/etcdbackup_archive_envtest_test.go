package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// scriptedArchiverReports plays the archivers' status ports: what each pod (by namespace and
// name) reports.
type scriptedArchiverReports struct {
	mu      sync.Mutex
	reports map[string]agent.ArchiveStatus
}

var archiverReports = &scriptedArchiverReports{reports: map[string]agent.ArchiveStatus{}}

func (s *scriptedArchiverReports) Report(_ context.Context, pod *corev1.Pod) (agent.ArchiveStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	report, ok := s.reports[pod.Namespace+"/"+pod.Name]
	if !ok {
		return report, fmt.Errorf("connection refused by archiver pod %s", pod.Name)
	}
	return report, nil
}

func (s *scriptedArchiverReports) set(pod *corev1.Pod, report agent.ArchiveStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports[pod.Namespace+"/"+pod.Name] = report
}

// A backup with spec.continuous runs one archiver, a Deployment it owns, and reports in
// status.archive what the archiver reports: the recoverable range, the lag, each gap (with a
// Warning event), and the Archiving condition, False with LagExceeded (and a Warning event) once
// the lag passes continuous.maxLag. Suspended, the archiver is scaled to none; without
// spec.continuous, it is deleted and status.archive stays as the record of what was written. No
// kubelet runs here: the test plays the archiver's pod and its report.
func TestContinuousBackupRunsOneArchiverAndReportsItsArchive(t *testing.T) {
	c := newCluster(t, "archived")
	b := newBackup(t, c.Namespace, c.Name, func(b *etcdv1alpha1.EtcdBackup) {
		b.Spec.Schedule = "@yearly"
		b.Spec.Continuous = &etcdv1alpha1.ContinuousArchive{MaxLag: &metav1.Duration{Duration: time.Minute}}
	})
	deployment := waitArchiver(t, b, 1)
	if !metav1.IsControlledBy(deployment, b) || deployment.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Fatalf("archiver %s: owner %v, strategy %q; want it owned by the EtcdBackup and recreated, never two pods at once",
			deployment.Name, deployment.OwnerReferences, deployment.Spec.Strategy.Type)
	}
	waitArchiving(t, b, metav1.ConditionUnknown, etcdv1alpha1.ReasonArchiverStarting)

	pod := playArchiverPod(t, b, deployment)
	waitArchiving(t, b, metav1.ConditionFalse, etcdv1alpha1.ReasonArchiverNotReporting)

	seen := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	point := func(rev int64, after time.Duration) agent.ArchivePoint {
		return agent.ArchivePoint{Revision: rev, Time: seen.Add(after)}
	}
	report := agent.ArchiveStatus{
		Lineage: "lineage-b",
		Ranges: []agent.ArchiveRange{
			{Lineage: "lineage-a", First: point(10, 0), Last: point(40, time.Minute)},
			{Lineage: "lineage-b", First: point(60, 2*time.Minute), Last: point(90, 3*time.Minute)},
		},
		HighestRevision: 93, LagRevisions: 3, LagSeconds: 4,
		Gaps: []agent.ArchiveGap{{Lineage: "lineage-b", AfterRevision: 40, ResumedAt: 60, Reason: "Compacted", Time: seen.Add(2 * time.Minute)}},
	}
	archiverReports.set(pod, report)
	nudge(t, b)
	cond := waitArchiving(t, b, metav1.ConditionTrue, etcdv1alpha1.ReasonArchiving)
	a := b.Status.Archive
	if a == nil || a.RecoverableRange == nil || a.RecoverableRange.Lineage != "lineage-b" || a.RecoverableRange.First.Revision != 60 || a.RecoverableRange.Last.Revision != 90 ||
		!a.RecoverableRange.Last.Time.Time.Equal(seen.Add(3*time.Minute)) || len(a.EarlierRanges) != 1 || a.EarlierRanges[0].Last.Revision != 40 ||
		a.HighestRevision != 93 || a.LagRevisions != 3 || a.LagSeconds != 4 || len(a.Gaps) != 1 {
		t.Fatalf("status.archive %+v; want the archiver's report: lineage-b 60..90 recoverable, lineage-a 10..40 earlier, 3 revisions (4s) behind, one gap", a)
	}
	if !strings.Contains(cond.Message, "revisions 60 to 90 are recoverable") {
		t.Errorf("Archiving says %q; want the recoverable range", cond.Message)
	}
	expectEvent(t, b, corev1.EventTypeWarning, etcdv1alpha1.ReasonArchiveGap, "broke after revision 40 (Compacted) and started again from a snapshot at revision 60")

	report.LagSeconds, report.LagRevisions = 150, 4000
	report.Error = "upload: connection reset"
	archiverReports.set(pod, report)
	nudge(t, b)
	cond = waitArchiving(t, b, metav1.ConditionFalse, etcdv1alpha1.ReasonLagExceeded)
	for _, want := range []string{"waited 2m30s", "continuous.maxLag 1m0s", "4000 revisions behind", "upload: connection reset"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("Archiving says %q; want %q", cond.Message, want)
		}
	}
	expectEvent(t, b, corev1.EventTypeWarning, etcdv1alpha1.ReasonLagExceeded, "more than continuous.maxLag 1m0s by 1m30s")

	updateBackup(t, b, func(b *etcdv1alpha1.EtcdBackup) { b.Spec.Suspend = true })
	waitArchiver(t, b, 0)
	waitArchiving(t, b, metav1.ConditionFalse, etcdv1alpha1.ReasonSuspended)

	updateBackup(t, b, func(b *etcdv1alpha1.EtcdBackup) { b.Spec.Suspend, b.Spec.Continuous = false, nil })
	eventually(t, 10*time.Second, func() error {
		err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(deployment), &appsv1.Deployment{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("archiver %s still there (%w) after spec.continuous was removed", deployment.Name, err)
	})
	// The Deployment goes before the reconcile's status write: the condition may still be there
	// for a moment after.
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		if b.Status.Archive == nil || b.Status.Archive.RecoverableRange == nil || meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionArchiving) != nil {
			return fmt.Errorf("status.archive %+v, conditions %+v; want the archive kept as a record and no Archiving condition", b.Status.Archive, b.Status.Conditions)
		}
		return nil
	})
}

// waitArchiver waits for b's archiver Deployment with the given replicas.
func waitArchiver(t *testing.T, b *etcdv1alpha1.EtcdBackup, replicas int32) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKey{Namespace: b.Namespace, Name: resources.ArchiverName(b.Name)}, d); err != nil {
			return err
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != replicas {
			return fmt.Errorf("archiver %s has replicas %v, want %d", d.Name, d.Spec.Replicas, replicas)
		}
		return nil
	})
	return d
}

// playArchiverPod makes the archiver's pod, ready, as the Deployment's ReplicaSet and the
// kubelet would.
func playArchiverPod(t *testing.T, b *etcdv1alpha1.EtcdBackup, d *appsv1.Deployment) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name + "-7d9f8-x2k4q", Namespace: b.Namespace, Labels: d.Spec.Template.Labels},
		Spec:       d.Spec.Template.Spec,
	}
	if err := k8sClient.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.PodIP = "10.0.0.9"
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	if err := k8sClient.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

func waitArchiving(t *testing.T, b *etcdv1alpha1.EtcdBackup, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var found metav1.Condition
	eventually(t, 40*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionArchiving)
		if cond == nil || cond.Status != status || cond.Reason != reason {
			return fmt.Errorf("Archiving condition %+v, want %s %s", cond, status, reason)
		}
		found = *cond
		return nil
	})
	return found
}

func updateBackup(t *testing.T, b *etcdv1alpha1.EtcdBackup, mutate func(*etcdv1alpha1.EtcdBackup)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		mutate(b)
		return k8sClient.Update(t.Context(), b)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// nudge wakes b's reconciler, which otherwise reads the archiver's report on a 15s period.
func nudge(t *testing.T, b *etcdv1alpha1.EtcdBackup) {
	t.Helper()
	updateBackup(t, b, func(b *etcdv1alpha1.EtcdBackup) {
		if b.Annotations == nil {
			b.Annotations = map[string]string{}
		}
		b.Annotations["test.etcd.database.dev/nudged"] = time.Now().Format(time.RFC3339Nano)
	})
}
