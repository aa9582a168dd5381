package controllers

import (
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// privateImage is the etcd image of a cluster whose spec.repository is private.
const privateImage = "registry.private/etcd:v3.6.16"

// imagePullWait is a pod of job whose agent fetch ended waited ago, after which container has
// waited with reason for its image; the containers before it have run as the kubelet runs
// them, the pod made half an hour ago.
func imagePullWait(t *testing.T, job *batchv1.Job, container, image, reason string, waited time.Duration) *corev1.Pod {
	t.Helper()
	now := time.Now()
	created, since := metav1.NewTime(now.Add(-30*time.Minute)), metav1.NewTime(now.Add(-waited))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x", Namespace: job.Namespace, CreationTimestamp: created,
			Labels: map[string]string{batchv1.JobNameLabel: job.Name, resources.LabelManagedBy: "etcd-operator"}},
		Spec:   job.Spec.Template.Spec,
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "Back-off pulling image \"" + image + "\""}}
	ran := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, StartedAt: created, FinishedAt: since}}
	past := true
	for _, ctr := range pod.Spec.InitContainers {
		st := corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image}
		switch {
		case ctr.Name == container:
			st.State, past = waiting, false
		case !past:
			st.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}
		case ctr.RestartPolicy != nil:
			st.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}} // a native sidecar
		default:
			st.State = ran
		}
		pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, st)
	}
	for _, ctr := range pod.Spec.Containers {
		st := corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
		if ctr.Name == container {
			st.State = waiting
		}
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, st)
	}
	if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	return pod
}

// A restore Job runs the cluster's etcd image after the agent's fetch: its pod has started when
// etcdutl cannot pull that image (a private spec.repository without
// spec.podTemplate.imagePullSecrets). A container that has waited agentStartDeadline for its
// image fails the restore, naming the image, the reason and the fix, with a Warning event; one
// that may still pull it has the restore looked at again when it would be late.
func TestRestoreJobThatCannotPullTheEtcdImageFails(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		waited       time.Duration
		wantFailed   bool
	}{
		{"back-off past the deadline", "ImagePullBackOff", agentStartDeadline + time.Minute, true},
		{"invalid name past the deadline", "InvalidImageName", agentStartDeadline + time.Minute, true},
		{"pulling failed a minute ago", "ErrImagePull", time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := inPlaceRestore("private")
			rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, StartTime: ptrTime(time.Now().Add(-time.Hour)),
				Replaced: &etcdv1alpha1.ReplacedData{ClusterID: "new"}}
			c := formedCluster(map[string]string{resources.AnnotationRestorePending: rs.Name})
			c.Spec.Repository = "registry.private/etcd"
			seed := resources.SeedMemberName(c.Name, string(rs.UID))
			staged := resources.MemberPVC(c, resources.MemberSpec{Name: seed})
			staged.Labels, staged.OwnerReferences = map[string]string{resources.LabelRestore: rs.Name}, nil
			job, err := resources.RestoreJob(rs, c, resources.RestoreMember{Name: seed, Members: []string{seed}},
				resources.RestoreSource{Storage: rs.Spec.Source.Location.StorageLocation, Key: "snap.db"}, "registry.test/agent", resources.EtcdImages{Repository: "registry.test/etcd"}, resources.PodSettings{})
			if err != nil {
				t.Fatal(err)
			}
			job.UID, job.CreationTimestamp = "job-uid", metav1.NewTime(time.Now().Add(-30*time.Minute))
			if err := ctrl.SetControllerReference(rs, job, testScheme(t)); err != nil {
				t.Fatal(err)
			}
			pod := imagePullWait(t, job, resources.RestoreEtcdutlContainer, privateImage, tc.reason, tc.waited)
			r, k8s := restoreReconciler(t, rs, c, staged, job, pod)
			recorder := events.NewFakeRecorder(20)
			r.Recorder = recorder

			result, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rs)})
			if err != nil {
				t.Fatal(err)
			}
			got := &etcdv1alpha1.EtcdRestore{}
			if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(rs), got); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
			if !tc.wantFailed {
				if got.Status.Phase != etcdv1alpha1.RestoreRestoring {
					t.Fatalf("phase %s, condition %+v: want Restoring while the image may still be pulled", got.Status.Phase, cond)
				}
				if left := agentStartDeadline - tc.waited; result.RequeueAfter <= 0 || result.RequeueAfter > left {
					t.Errorf("requeue after %s, want at most %s: a pod waiting for its image wakes nothing", result.RequeueAfter, left)
				}
				return
			}
			if got.Status.Phase != etcdv1alpha1.RestoreFailed || cond == nil || cond.Reason != etcdv1alpha1.ReasonJobNotStarting {
				t.Fatalf("phase %s, condition %+v: want Failed, reason %s", got.Status.Phase, cond, etcdv1alpha1.ReasonJobNotStarting)
			}
			evs := drainEvents(recorder)
			for _, want := range []string{privateImage, tc.reason, resources.RestoreEtcdutlContainer, "spec.podTemplate.imagePullSecrets"} {
				if !strings.Contains(cond.Message, want) {
					t.Errorf("condition message %q does not say %q", cond.Message, want)
				}
				if !strings.Contains(evs, want) {
					t.Errorf("events %q do not say %q", evs, want)
				}
			}
			if !strings.Contains(evs, "Warning RestoreFailed") {
				t.Errorf("events %q, want a Warning RestoreFailed", evs)
			}
		})
	}
}

// A verify Job's etcdutl and etcd run the cluster's etcd image, and its check the operator's,
// each after containers that have run: a container of any of them that has waited
// agentStartDeadline for its image ends the verification as NotRun, never as a failed
// snapshot, naming the image, the reason and the fix, with a Warning event. One that may still
// pull it has the backup looked at again when it would be late: nothing else wakes it.
func TestVerifyJobThatCannotPullAnImageIsNotRun(t *testing.T) {
	for _, tc := range []struct {
		name, container, image, reason string
		waited                         time.Duration
		wantRecorded                   bool
	}{
		{"etcdutl past the deadline", resources.VerifyEtcdutlContainer, privateImage, "ImagePullBackOff", agentStartDeadline + time.Minute, true},
		{"the check past the deadline", resources.VerifyContainer, "registry.test/agent", "ErrImagePull", agentStartDeadline + time.Minute, true},
		{"etcdutl a minute ago", resources.VerifyEtcdutlContainer, privateImage, "ImagePullBackOff", time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backup, c, job := verifyingBackup(t, "registry.private/etcd", 30*time.Minute)
			pod := imagePullWait(t, job, tc.container, tc.image, tc.reason, tc.waited)
			got, result, recorder := reconcileVerifyingBackup(t, backup, c, job, pod)
			if !tc.wantRecorded {
				if got.Status.LastVerified != nil {
					t.Fatalf("lastVerified %+v while the image may still be pulled", got.Status.LastVerified)
				}
				if left := agentStartDeadline - tc.waited; result.RequeueAfter <= 0 || result.RequeueAfter > left {
					t.Errorf("requeue after %s, want at most %s: a pod waiting for its image wakes nothing", result.RequeueAfter, left)
				}
				return
			}
			lv := got.Status.LastVerified
			if lv == nil || lv.Result != etcdv1alpha1.SnapshotNotVerified || got.Status.LastBackup.Verification == nil ||
				got.Status.LastBackup.Verification.Result != etcdv1alpha1.SnapshotNotVerified {
				t.Fatalf("lastVerified %+v, the snapshot's %+v: want NotRun, the snapshot neither proven nor failed", lv, got.Status.LastBackup.Verification)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionVerified)
			if cond == nil || cond.Reason != etcdv1alpha1.ReasonVerificationNotRun {
				t.Fatalf("Verified condition %+v, want %s", cond, etcdv1alpha1.ReasonVerificationNotRun)
			}
			evs := drainEvents(recorder)
			for _, want := range []string{tc.image, tc.reason, tc.container, "spec.podTemplate.imagePullSecrets"} {
				if !strings.Contains(cond.Message, want) {
					t.Errorf("condition message %q does not say %q", cond.Message, want)
				}
				if !strings.Contains(evs, want) {
					t.Errorf("events %q do not say %q", evs, want)
				}
			}
			if !strings.Contains(evs, "Warning VerificationNotRun") {
				t.Errorf("events %q, want a Warning VerificationNotRun", evs)
			}
		})
	}
}

// verifyingBackup is EtcdBackup nightly of formed cluster c (of spec.repository repository, if
// not empty) with two completed runs, and the Job verifying the newest, made jobAge ago.
func verifyingBackup(t *testing.T, repository string, jobAge time.Duration) (*etcdv1alpha1.EtcdBackup, *etcdv1alpha1.EtcdCluster, *batchv1.Job) {
	t.Helper()
	backup := &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "backup-uid", CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "c", Verify: &etcdv1alpha1.BackupVerification{Policy: etcdv1alpha1.VerifyAlways},
			Destination: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
		Status: etcdv1alpha1.EtcdBackupStatus{History: completedRuns(2)},
	}
	backup.Status.LastBackup = backup.Status.History[0].Artifact.DeepCopy()
	c := formedCluster(nil)
	c.Spec.Repository = repository
	job, err := resources.VerifyJob(backup, c, resources.VerifySnapshot{Storage: backup.Spec.Destination, Key: "s-2.db",
		Artifact: *backup.Status.LastBackup, Run: "run-2"}, "registry.test/agent", resources.EtcdImages{Repository: "registry.test/etcd"}, resources.PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	job.UID, job.CreationTimestamp = "job-uid", metav1.NewTime(time.Now().Add(-jobAge))
	if err := ctrl.SetControllerReference(backup, job, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	return backup, c, job
}

// reconcileVerifyingBackup reconciles backup once among objects, and returns it as written.
func reconcileVerifyingBackup(t *testing.T, backup *etcdv1alpha1.EtcdBackup, objects ...client.Object) (*etcdv1alpha1.EtcdBackup, ctrl.Result, *events.FakeRecorder) {
	t.Helper()
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(append(objects, backup)...).WithStatusSubresource(backup).Build()
	recorder := events.NewFakeRecorder(20)
	r := &EtcdBackupReconciler{Client: k8s, APIReader: k8s, Recorder: recorder, Now: time.Now}
	result, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(backup)})
	if err != nil {
		t.Fatal(err)
	}
	got := &etcdv1alpha1.EtcdBackup{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(backup), got); err != nil {
		t.Fatal(err)
	}
	return got, result, recorder
}
