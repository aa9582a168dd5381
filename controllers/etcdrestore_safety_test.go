package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

func inPlaceRestore(name string) *etcdv1alpha1.EtcdRestore {
	return &etcdv1alpha1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name), Finalizers: []string{restoreFinalizer}},
		Spec: etcdv1alpha1.EtcdRestoreSpec{
			Source: etcdv1alpha1.RestoreSource{Location: &etcdv1alpha1.SnapshotLocation{
				StorageLocation: etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}, Key: "snap.db"}},
			Target: etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreInPlace, ClusterName: "c"},
		},
	}
}

func formedCluster(annotations map[string]string) *etcdv1alpha1.EtcdCluster {
	c := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "cluster-uid", Annotations: annotations},
		Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16"},
		Status: etcdv1alpha1.EtcdClusterStatus{ClusterID: "new", ReadyMembers: 1,
			Conditions: []metav1.Condition{{Type: etcdv1alpha1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: "QuorumHealthy", LastTransitionTime: metav1.Now()}}},
	}
	return c
}

func restoreReconciler(t *testing.T, objects ...client.Object) (*EtcdRestoreReconciler, client.Client) {
	t.Helper()
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objects...).
		WithStatusSubresource(&etcdv1alpha1.EtcdRestore{}, &etcdv1alpha1.EtcdCluster{}).Build()
	return &EtcdRestoreReconciler{Client: cacheView(k8s), APIReader: k8s, AgentImage: "registry.test/agent", DefaultImages: resources.EtcdImages{Repository: "registry.test/etcd"}, Now: time.Now,
		Keyspaces: sameKeyspaceEverywhere, ProbeAddresses: func(context.Context, []string) string { return "" }}, k8s
}

// sameKeyspaceEverywhere answers for each of a cluster's spec.size members the same keyspace
// at the revision asked: members that hold one restored store.
func sameKeyspaceEverywhere(_ context.Context, c *etcdv1alpha1.EtcdCluster, revision int64) (map[string]etcd.KeyspaceDigest, error) {
	digests := map[string]etcd.KeyspaceDigest{}
	for i := range int(c.Spec.Size) {
		digests[fmt.Sprintf("%s-m%d", c.Name, i)] = etcd.KeyspaceDigest{Revision: revision, Hash: 42, CompactRevision: revision, Keys: 7}
	}
	return digests, nil
}

func reconcileRestore(t *testing.T, r *EtcdRestoreReconciler, rs *etcdv1alpha1.EtcdRestore) *etcdv1alpha1.EtcdRestore {
	t.Helper()
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rs)}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	got := &etcdv1alpha1.EtcdRestore{}
	if err := r.Get(t.Context(), client.ObjectKeyFromObject(rs), got); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	return got
}

// An in-place restore whose completion was not recorded (the cluster was released, the Job
// deleted, then the status write lost) is looked at again: its seed claim is now a live
// member's, and it must never stage a snapshot onto it again. Before, the missing Job was
// started anew, writing the snapshot over the member's data.
func TestRetriedInPlaceRestoreNeverRestagesOntoALiveMember(t *testing.T) {
	rs := inPlaceRestore("r1")
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, Replaced: &etcdv1alpha1.ReplacedData{ClusterID: "old"}}
	c := formedCluster(nil)
	seed := resources.SeedMemberName(c.Name, string(rs.UID))
	claim := resources.MemberPVC(c, resources.MemberSpec{Name: seed})
	r, k8s := restoreReconciler(t, rs, c, claim)

	got := reconcileRestore(t, r, rs)
	jobs := &batchv1.JobList{}
	if err := k8s.List(t.Context(), jobs, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 0 {
		t.Fatalf("a restore Job was started onto member %s's live claim", seed)
	}
	if got.Status.Phase != etcdv1alpha1.RestoreCompleted {
		t.Fatalf("phase %q, want Completed: the cluster serves the restored data", got.Status.Phase)
	}
}

// Two in-place restores of one cluster: while the first holds it, the second is refused with a
// message, not left waiting (holding OLM upgrades back) or run against the other's data.
func TestSecondInPlaceRestoreOfAClusterIsRefused(t *testing.T) {
	first, second := inPlaceRestore("first"), inPlaceRestore("second")
	c := formedCluster(nil)
	r, k8s := restoreReconciler(t, first, second, c)
	for _, rs := range []*etcdv1alpha1.EtcdRestore{first, second} {
		rs.Status.Phase = ""
		reconcileRestore(t, r, rs)
	}
	got := reconcileRestore(t, r, second)
	cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
	if got.Status.Phase != etcdv1alpha1.RestoreFailed || cond == nil || cond.Reason != etcdv1alpha1.ReasonTargetHeld {
		t.Fatalf("second restore: phase %q, condition %+v; want Failed TargetHeld", got.Status.Phase, cond)
	}
	held := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), held); err != nil {
		t.Fatal(err)
	}
	if holder := held.Annotations[resources.AnnotationRestorePending]; holder != "first" {
		t.Fatalf("the cluster is held by %q, want the first restore", holder)
	}
	// The refused restore cleans up what it staged, which is nothing: the first's staged claim
	// stays.
	staged := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(stagedClaim(c, resources.SeedMemberName(c.Name, string(first.UID)))), staged); err != nil || !staged.DeletionTimestamp.IsZero() {
		t.Fatalf("the first restore's staged claim: %v, deleting %v; want it kept", err, staged.DeletionTimestamp)
	}
}

// A restore deleted before its cut-over takes back its hold on the cluster and its staged claim:
// a hold left behind would stop a later restore, and the cluster's members, for good.
func TestDeletedRestoreReleasesItsCluster(t *testing.T) {
	rs := inPlaceRestore("gone")
	rs.Status.Phase = etcdv1alpha1.RestoreRestoring
	rs.DeletionTimestamp = ptrTime(time.Now())
	c := formedCluster(map[string]string{resources.AnnotationRestorePending: "gone"})
	seed := resources.SeedMemberName(c.Name, string(rs.UID))
	staged := resources.MemberPVC(c, resources.MemberSpec{Name: seed})
	staged.Labels, staged.OwnerReferences = map[string]string{resources.LabelRestore: "gone"}, nil
	r, k8s := restoreReconciler(t, rs, c, staged)

	reconcileRestore(t, r, rs)
	released := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), released); err != nil {
		t.Fatal(err)
	}
	if holder, held := released.Annotations[resources.AnnotationRestorePending]; held {
		t.Fatalf("the deleted restore still holds the cluster (%q)", holder)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(staged), &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Fatalf("staged claim: %v, want it deleted", err)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(rs), &etcdv1alpha1.EtcdRestore{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the restore: %v, want it gone once its finalizer ran", err)
	}
}

// A restore into a paused cluster, which could never carry out the cut-over, fails at once
// with the reason, rather than holding OLM upgrades back indefinitely.
func TestRestoreIntoAPausedClusterFails(t *testing.T) {
	rs := inPlaceRestore("paused")
	c := formedCluster(nil)
	c.Spec.Paused = true
	r, _ := restoreReconciler(t, rs, c)
	got := reconcileRestore(t, r, rs)
	if cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded); got.Status.Phase != etcdv1alpha1.RestoreFailed || cond.Reason != etcdv1alpha1.ReasonTargetPaused {
		t.Fatalf("phase %q, condition %+v", got.Status.Phase, cond)
	}
}

// A finished restore is looked at again on every status change of the cluster it restored:
// once its Job is gone, such a look sends the API server no delete.
func TestFinishedRestoreLooksAtItsJobInTheCacheFirst(t *testing.T) {
	rs := inPlaceRestore("done")
	rs.Status.Phase = etcdv1alpha1.RestoreCompleted
	c := formedCluster(nil)
	deletes := 0
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(rs, c).
		WithInterceptorFuncs(interceptor.Funcs{Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			deletes++
			return cl.Delete(ctx, obj, opts...)
		}}).Build()
	r := &EtcdRestoreReconciler{Client: cacheView(k8s), APIReader: k8s, Now: time.Now, Keyspaces: sameKeyspaceEverywhere}
	for range 3 {
		reconcileRestore(t, r, rs)
	}
	if deletes != 0 {
		t.Fatalf("%d deletes sent for a finished restore whose Job is gone", deletes)
	}
}

// The S3 credentials and CA a restore's source names are the user's Secrets, which the
// manager's cache does not hold: they are found all the same (read past the cache), and one
// that is missing is still reported as missing.
func TestRestoreFindsTheUsersS3Secrets(t *testing.T) {
	usersSecret := func(name string) client.Object {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string][]byte{"k": []byte("v")}}
	}
	for _, tc := range []struct {
		name        string
		secrets     []client.Object
		wantMissing string
	}{
		{"both present", []client.Object{usersSecret("creds"), usersSecret("ca")}, ""},
		{"CA missing", []client.Object{usersSecret("creds")}, "Secret ca does not exist"},
		{"the Jobs' ServiceAccount missing", []client.Object{usersSecret("creds"), usersSecret("ca")}, "ServiceAccount etcd-restores does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := inPlaceRestore("s3")
			rs.Spec.Source.Location.StorageLocation = etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{
				Bucket: "b", Endpoint: "https://s3", CredentialsSecretName: "creds", CASecretName: "ca"}}
			if strings.Contains(tc.wantMissing, "ServiceAccount") {
				rs.Spec.Source.Location.S3.ServiceAccountName = "etcd-restores"
			}
			r, _ := restoreReconciler(t, append(tc.secrets, rs, formedCluster(nil))...)
			got := reconcileRestore(t, r, rs)
			cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
			missing := cond != nil && cond.Reason == etcdv1alpha1.ReasonSourceNotFound
			if missing != (tc.wantMissing != "") || (missing && !strings.Contains(cond.Message, tc.wantMissing)) {
				t.Fatalf("phase %q, condition %+v; want a missing Secret reported: %q", got.Status.Phase, cond, tc.wantMissing)
			}
		})
	}
}

// A restore whose Job's pod never starts (its snapshot claim attached to another node, an
// image that cannot be pulled) fails after agentStartDeadline with what holds the pod, and lets
// go of the cluster it had not touched, instead of holding it and OLM upgrades back for the
// Job's two hours. Before, it stayed Restoring, with no requeue.
func TestRestoreWhoseJobNeverStartsFailsAndReleasesTheCluster(t *testing.T) {
	rs := inPlaceRestore("stuck")
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, StartTime: ptrTime(time.Now().Add(-time.Hour)),
		Replaced: &etcdv1alpha1.ReplacedData{ClusterID: "new"}}
	c := formedCluster(map[string]string{resources.AnnotationRestorePending: rs.Name})
	seed := resources.SeedMemberName(c.Name, string(rs.UID))
	staged := resources.MemberPVC(c, resources.MemberSpec{Name: seed})
	staged.Labels, staged.OwnerReferences = map[string]string{resources.LabelRestore: rs.Name}, nil
	created := metav1.NewTime(time.Now().Add(-agentStartDeadline - time.Minute))
	managed := map[string]string{resources.LabelManagedBy: "etcd-operator"}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: resources.RestoreJobName(rs.Name, 0), Namespace: "ns", UID: "job-uid", CreationTimestamp: created, Labels: managed}}
	if err := ctrl.SetControllerReference(rs, job, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x", Namespace: "ns", CreationTimestamp: created,
			Labels: map[string]string{batchv1.JobNameLabel: job.Name, resources.LabelManagedBy: "etcd-operator"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{Name: resources.RestoreFetchContainer,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "registry.test/agent: not found"}}}}},
	}
	if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	r, k8s := restoreReconciler(t, rs, c, staged, job, pod)

	got := reconcileRestore(t, r, rs)
	cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
	if got.Status.Phase != etcdv1alpha1.RestoreFailed || cond == nil || cond.Reason != etcdv1alpha1.ReasonJobNotStarting {
		t.Fatalf("phase %q, condition %+v; want Failed JobNotStarting", got.Status.Phase, cond)
	}
	if !strings.Contains(cond.Message, "ErrImagePull") || !strings.Contains(cond.Message, "was not touched") {
		t.Errorf("message %q does not say what holds the pod and that the cluster is as it was", cond.Message)
	}
	released := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), released); err != nil {
		t.Fatal(err)
	}
	if holder, held := released.Annotations[resources.AnnotationRestorePending]; held {
		t.Errorf("the failed restore still holds the cluster (%q)", holder)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(staged), &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("staged claim: %v, want it deleted", err)
	}
}

// A restore whose data is installed waits for its cluster to serve; past restoreServeDeadline
// it says so (ClusterNotServing, a Warning event) and no longer holds OLM upgrades back, but is
// not failed: the data is the cluster's now. Before, it stayed Restoring without a word, and
// Upgradeable stayed False, for as long as the cluster did not serve.
func TestRestoreWaitingLongForItsClusterStopsHoldingUpgrades(t *testing.T) {
	for _, tc := range []struct {
		name          string
		installedAgo  time.Duration
		wantReason    string
		wantUpgrades  bool
		wantRequeueIn time.Duration
	}{
		{"just cut over", time.Minute, etcdv1alpha1.ReasonRestoring, false, restoreServeDeadline - time.Minute},
		{"long after the cut-over", restoreServeDeadline + time.Minute, etcdv1alpha1.ReasonClusterNotServing, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := inPlaceRestore("slow")
			rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, InstallTime: ptrTime(time.Now().Add(-tc.installedAgo)),
				Replaced: &etcdv1alpha1.ReplacedData{ClusterID: "old"}}
			seed := resources.SeedMemberName("c", string(rs.UID))
			c := formedCluster(map[string]string{resources.AnnotationRestorePending: rs.Name, resources.AnnotationRestoreSeed: seed})
			c.Status.ReadyMembers, c.Status.Conditions = 0, nil
			claim := resources.MemberPVC(c, resources.MemberSpec{Name: seed})
			r, _ := restoreReconciler(t, rs, c, claim)

			result, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rs)})
			if err != nil {
				t.Fatal(err)
			}
			got := &etcdv1alpha1.EtcdRestore{}
			if err := r.Get(t.Context(), client.ObjectKeyFromObject(rs), got); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
			if got.Status.Phase != etcdv1alpha1.RestoreRestoring || cond == nil || cond.Reason != tc.wantReason {
				t.Fatalf("phase %q, condition %+v; want Restoring, reason %s", got.Status.Phase, cond, tc.wantReason)
			}
			if up := upgradeable(nil, []etcdv1alpha1.EtcdRestore{*got}); (up.Status == metav1.ConditionTrue) != tc.wantUpgrades {
				t.Errorf("Upgradeable %s (%s), want upgrades allowed: %v", up.Status, up.Message, tc.wantUpgrades)
			}
			if d := result.RequeueAfter - tc.wantRequeueIn; d < -2*time.Second || d > 2*time.Second {
				t.Errorf("requeue after %s, want about %s", result.RequeueAfter, tc.wantRequeueIn)
			}
		})
	}
}

// What the restore Job restored is in status before the cut-over: the reconcile that reads the
// Job's report records it and stops there, and only the next one tells the cluster to restart
// from the restored member. Before, both happened in one reconcile whose status was written
// last, and an operator that stopped in between completed the restore at revision 0 (found by
// the failpoint walk, at restoreCutOverStarted).
func TestInPlaceRestoreRecordsTheRestoredRevisionBeforeTheCutOver(t *testing.T) {
	rs := inPlaceRestore("recorded")
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, StartTime: ptrTime(time.Now()),
		Replaced: &etcdv1alpha1.ReplacedData{ClusterID: "old"}}
	c := formedCluster(map[string]string{resources.AnnotationRestorePending: rs.Name})
	c.Status.ClusterID = "old"
	seed := resources.SeedMemberName(c.Name, string(rs.UID))
	staged := resources.MemberPVC(c, resources.MemberSpec{Name: seed})
	staged.Labels, staged.OwnerReferences = map[string]string{resources.LabelRestore: rs.Name}, nil
	job, pod := finishedRestoreJob(t, rs, map[string]string{resources.LabelManagedBy: "etcd-operator"})
	r, k8s := restoreReconciler(t, rs, c, staged, job, pod)
	cutOver := func() bool {
		live := &etcdv1alpha1.EtcdCluster{}
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), live); err != nil {
			t.Fatal(err)
		}
		return live.Annotations[resources.AnnotationRestoreSeed] == seed
	}

	got := reconcileRestore(t, r, rs)
	if ptr.Deref(got.Status.RestoredRevision, 0) != 42 || got.Status.SnapshotSHA256 != "abc" {
		t.Fatalf("status %+v: want the Job's revision 42 and sha256 recorded", got.Status)
	}
	if cutOver() {
		t.Fatal("the cluster was cut over in the reconcile that recorded the revision")
	}
	got = reconcileRestore(t, r, got)
	if !cutOver() || ptr.Deref(got.Status.RestoredRevision, 0) != 42 {
		t.Fatalf("after the record: cut over %t, status %+v; want the cut-over with revision 42 kept", cutOver(), got.Status)
	}
}

// An in-place restore whose completion write is lost to a conflict cleans up nothing: the hold
// on the cluster stays until the outcome is on record. The next look records it, then lets go;
// no restore Job is started again at any point, and the restore completes once.
func TestRestoreOutcomeLostToAConflictIsRecordedBeforeItsCleanUp(t *testing.T) {
	rs := inPlaceRestore("r1")
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, Replaced: &etcdv1alpha1.ReplacedData{ClusterID: "old"}}
	seed := resources.SeedMemberName("c", string(rs.UID))
	c := formedCluster(map[string]string{resources.AnnotationRestorePending: rs.Name, resources.AnnotationRestoreSeed: seed})
	claim := resources.MemberPVC(c, resources.MemberSpec{Name: seed})
	conflicts, completions := 1, 0
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(rs, c, claim).
		WithStatusSubresource(&etcdv1alpha1.EtcdRestore{}, &etcdv1alpha1.EtcdCluster{}).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if restore, ok := obj.(*etcdv1alpha1.EtcdRestore); ok && restore.Status.Phase == etcdv1alpha1.RestoreCompleted {
				if conflicts > 0 {
					conflicts--
					return apierrors.NewConflict(schema.GroupResource{Group: "etcd.database.dev", Resource: "etcdrestores"}, obj.GetName(), nil)
				}
				completions++
			}
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		}}).Build()
	r := &EtcdRestoreReconciler{Client: cacheView(k8s), APIReader: k8s, AgentImage: "registry.test/agent", DefaultImages: resources.EtcdImages{Repository: "registry.test/etcd"}, Now: time.Now, Keyspaces: sameKeyspaceEverywhere}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rs)}
	held := func() bool {
		t.Helper()
		got := &etcdv1alpha1.EtcdCluster{}
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), got); err != nil {
			t.Fatal(err)
		}
		return got.Annotations[resources.AnnotationRestorePending] == rs.Name
	}

	if _, err := r.Reconcile(t.Context(), req); err == nil {
		t.Fatal("a reconcile whose record was refused reported success")
	}
	if !held() {
		t.Fatal("the cluster was let go before the restore's outcome was on record")
	}
	for range 2 {
		if _, err := r.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	got := &etcdv1alpha1.EtcdRestore{}
	if err := k8s.Get(t.Context(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != etcdv1alpha1.RestoreCompleted || completions != 1 || held() {
		t.Fatalf("phase %q, completions recorded %d, cluster still held %v; want Completed once, then the hold gone", got.Status.Phase, completions, held())
	}
	jobs := &batchv1.JobList{}
	if err := k8s.List(t.Context(), jobs, client.InNamespace("ns")); err != nil || len(jobs.Items) != 0 {
		t.Fatalf("restore Jobs %v (%v): none may start again", jobs.Items, err)
	}
}

// finishedRestoreJob is rs's restore Job, completed, and its pod, whose fetch container reported
// a restore at revision 42: what the restore reconciler reads before it cuts over.
func finishedRestoreJob(t *testing.T, rs *etcdv1alpha1.EtcdRestore, labels map[string]string) (*batchv1.Job, *corev1.Pod) {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: resources.RestoreJobName(rs.Name, 0), Namespace: "ns", UID: "job-uid", Labels: labels},
		Status:     batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}},
	}
	if err := ctrl.SetControllerReference(rs, job, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	report := `{"restore":{"uri":"pvc://backups/snap.db","sizeBytes":1,"sha256":"abc","revision":42}}`
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x", Namespace: "ns",
			Labels: map[string]string{batchv1.JobNameLabel: job.Name, resources.LabelManagedBy: "etcd-operator"}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, InitContainerStatuses: []corev1.ContainerStatus{{Name: resources.RestoreFetchContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: report}}}}},
	}
	if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	return job, pod
}

// A restore into a new cluster of a snapshot of another cluster gives the new cluster's record
// the passwords the operator set on the other one, before the new cluster forms: the snapshot
// holds the one in force when it was taken, which the Secret the new cluster names may no
// longer have. The new cluster's reconciler then logs in with it
// (TestRestoredDataIsLoggedIntoWithAPasswordFromTheHistory).
func TestRestoreIntoANewClusterCarriesTheSourcesRootPasswords(t *testing.T) {
	rs := inPlaceRestore("copy")
	rs.Spec.Source = etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: "hourly"}}
	rs.Spec.Target = etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreNew, ClusterName: "copy"}
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, StartTime: ptrTime(time.Now()), RestoredRevision: ptr.To[int64](42)}
	source := formedCluster(nil)
	source.Spec.Auth = &etcdv1alpha1.AuthSpec{RootSecretName: "root"}
	sourceRecord, err := resources.RootCredentials(source, resources.RootRecord{Password: "now"}.
		WithPasswordSet("at-backup", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)).WithPasswordSet("now", time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)))
	if err != nil {
		t.Fatal(err)
	}
	target := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: "ns", UID: "copy-uid",
			Annotations: map[string]string{resources.AnnotationRestoredBy: rs.Name, resources.AnnotationRestorePending: rs.Name}},
		Spec: etcdv1alpha1.EtcdClusterSpec{Size: 1, Version: "3.6.16", Auth: &etcdv1alpha1.AuthSpec{RootSecretName: "root"}},
	}
	job, pod := finishedRestoreJob(t, rs, resources.ManagedBy())
	r, k8s := restoreReconciler(t, rs, source, sourceRecord, target, completedBackup("hourly", "c", 30, 700), job, pod)

	reconcileRestore(t, r, rs)
	record := &corev1.Secret{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.RootCredentialsSecretName("copy")}, record); err != nil {
		t.Fatalf("the new cluster's record: %v", err)
	}
	rec, err := resources.ReadRootCredentials(record)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.History) != 2 || rec.History[0].Password != "now" || rec.History[1].Password != "at-backup" || rec.Password != "" {
		t.Fatalf("the new cluster's record %+v, want the source's history and no password etcd is known to have yet", rec)
	}
	if !metav1.IsControlledBy(record, target) {
		t.Fatalf("the new cluster's record is owned by %v, want EtcdCluster copy", record.OwnerReferences)
	}
	released := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(target), released); err != nil {
		t.Fatal(err)
	}
	if _, held := released.Annotations[resources.AnnotationRestorePending]; held {
		t.Fatal("the new cluster was not let form once its passwords were carried")
	}
}

// Of restore Jobs that have not started, the one whose start deadline comes first says when to
// look again: the restore fails at that deadline, not at the last Job's. Before, the reconciler
// waited the longest of the Jobs' waits, and a Job stuck since long before failed only when the
// newest one's deadline came, minutes late.
func TestRestoreJobsNotStartingAreLookedAtByTheSoonestDeadline(t *testing.T) {
	rs := restoreOfHourly(&etcdv1alpha1.EtcdClusterSpec{Size: 2, Version: "3.6.16"})
	rs.UID = "restore-uid"
	now := time.Now()
	var objects []client.Object
	for i, age := range []time.Duration{agentStartDeadline - time.Minute, 0, agentStartDeadline - 3*time.Minute} {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: resources.RestoreJobName(rs.Name, i), Namespace: "ns",
			CreationTimestamp: metav1.NewTime(now.Add(-age)), Labels: map[string]string{resources.LabelManagedBy: "etcd-operator"}}}
		objects = append(objects, job)
	}
	r, _ := restoreReconciler(t, append(objects, rs)...)
	r.Now = func() time.Time { return now }
	wait, done, err := r.runRestoreJobs(t.Context(), rs, formedCluster(nil), []string{"a", "b", "c"}, snapshotSource{uri: "pvc://backups/hourly.db"})
	if err != nil || done {
		t.Fatalf("runRestoreJobs: done %t, %v; want the Jobs waited on", done, err)
	}
	if wait <= 0 || wait > time.Minute {
		t.Fatalf("looks again in %v; want within the minute the oldest Job has left", wait)
	}
}
