package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// newClusterRestore is a restore of a snapshot on a claim into a new cluster of size members.
func newClusterRestore(size int32) *etcdv1alpha1.EtcdRestore {
	rs := inPlaceRestore("copy")
	rs.Spec.Target = etcdv1alpha1.RestoreTarget{Mode: etcdv1alpha1.RestoreNew, ClusterName: "copy",
		Cluster: &etcdv1alpha1.EtcdClusterSpec{Size: size, Version: "3.6.16"}}
	rs.Spec.RevisionBump = "5000000"
	return rs
}

// readWithACloudIdentity moves rs's source to a snapshot in S3 read with a ServiceAccount's
// cloud identity, which a member's pod does not take on (restorableInMemberPods): a Job
// prepares each member, all at once. It returns the ServiceAccount the source names.
func readWithACloudIdentity(rs *etcdv1alpha1.EtcdRestore) *corev1.ServiceAccount {
	rs.Spec.Source.Location = &etcdv1alpha1.SnapshotLocation{
		StorageLocation: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{Bucket: "b", Endpoint: "https://s3.test", ServiceAccountName: "reader"}},
		Key:             "snap.db"}
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: rs.Namespace}}
}

// restoreJobsOfTest are the restore's Jobs, by the index of the member each prepares.
func restoreJobsOfTest(t *testing.T, k8s client.Client, rs *etcdv1alpha1.EtcdRestore, n int) []*batchv1.Job {
	t.Helper()
	jobs := make([]*batchv1.Job, n)
	for i := range jobs {
		jobs[i] = &batchv1.Job{}
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: rs.Namespace, Name: resources.RestoreJobName(rs.Name, i)}, jobs[i]); err != nil {
			t.Fatalf("restore Job %d: %v", i, err)
		}
	}
	return jobs
}

// expectRestoresMember checks that job's etcdutl restores member as one of the cluster
// initialCluster names: every member's restore names them all.
func expectRestoresMember(t *testing.T, job *batchv1.Job, member, initialCluster string) {
	t.Helper()
	if got := argOf(job, "--name"); got != member {
		t.Errorf("Job %s restores member %q, want %s", job.Name, got, member)
	}
	if got := argOf(job, "--initial-cluster"); got != initialCluster {
		t.Errorf("Job %s restores the membership %s, want every member's: %s", job.Name, got, initialCluster)
	}
}

func argOf(job *batchv1.Job, flag string) string {
	for _, c := range job.Spec.Template.Spec.InitContainers {
		if c.Name != resources.RestoreEtcdutlContainer {
			continue
		}
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v
			}
		}
	}
	return ""
}

// A restore into a new cluster of three of a snapshot in S3 prepares all three members at once
// from the one snapshot, as etcd's recovery guide restores a cluster: a Job and a claim per
// member, every Job restoring the same membership with the same revision bump, every claim
// planning the same bootstrap, so that the cluster forms from them together instead of one
// member whose peers then join as learners and receive the whole snapshot over the network.
// Before, one seed member was restored (one Job, one claim planning a cluster of one).
func TestARestoreIntoANewClusterPreparesEveryMemberAtOnce(t *testing.T) {
	rs := newClusterRestore(3)
	sa := readWithACloudIdentity(rs)
	r, k8s, rs, target := startClusterRestore(t, rs, sa)

	members := resources.RestoreMemberNames("copy", string(rs.UID), 3)
	wantInitial := resources.InitialCluster(target, members)
	jobs := restoreJobsOfTest(t, k8s, rs, 3)
	for i, job := range jobs {
		expectRestoresMember(t, job, members[i], wantInitial)
		if got := argOf(job, "--bump-revision"); got != "5000000" {
			t.Errorf("Job %s bumps by %q, want 5000000 like every other", job.Name, got)
		}
		if got := job.Spec.Template.Spec.Volumes[len(job.Spec.Template.Spec.Volumes)-1].PersistentVolumeClaim; got == nil || got.ClaimName != resources.PVCName(members[i]) {
			t.Errorf("Job %s writes to claim %v, want %s", job.Name, got, resources.PVCName(members[i]))
		}
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(members[i])}, pvc); err != nil {
			t.Fatalf("claim of member %s: %v", members[i], err)
		}
		if got := pvc.Annotations[resources.AnnotationInitialCluster]; got != wantInitial || pvc.Annotations[resources.AnnotationClusterState] != "new" {
			t.Errorf("claim %s plans the bootstrap %s (%s), want every member's, new", pvc.Name, got, pvc.Annotations[resources.AnnotationClusterState])
		}
	}

	// Two of three Jobs done: the cluster stays held. (The third was just made: its pod has
	// not been created yet, which is not yet a Job that does not start.)
	jobs[1].CreationTimestamp = metav1.Now()
	if err := k8s.Update(t.Context(), jobs[1]); err != nil {
		t.Fatal(err)
	}
	report := agent.Report{Restore: &agent.RestoreResult{URI: "s3://b/snap.db", SizeBytes: 1, SHA256: "abc", Revision: 42}}
	completeRestoreJob(t, k8s, jobs[0], report)
	completeRestoreJob(t, k8s, jobs[2], report)
	rs = reconcileRestore(t, r, rs)
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(target), target); err != nil || target.Annotations[resources.AnnotationRestorePending] == "" {
		t.Fatalf("with one Job still running the cluster was let form (%v)", err)
	}
	completeRestoreJob(t, k8s, jobs[1], report)
	rs = reconcileRestore(t, r, rs) // records what was restored
	rs = reconcileRestore(t, r, rs) // lets the cluster form
	if ptr.Deref(rs.Status.RestoredRevision, 0) != 42 || rs.Status.RevisionBump != 5000000 {
		t.Errorf("restored revision %d, bump %d; want 42 and 5000000", ptr.Deref(rs.Status.RestoredRevision, 0), rs.Status.RevisionBump)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(target), target); err != nil || target.Annotations[resources.AnnotationRestorePending] != "" {
		t.Fatalf("every member restored, the cluster is still held (%v)", err)
	}

	// The cluster serves at its size: the restore completes once every member holds the
	// same store, and its Jobs go.
	markServing(t, k8s, target, 3)
	rs = reconcileRestore(t, r, rs)
	if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
		t.Fatalf("restore %s: %s", rs.Status.Phase, conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
	}
	if says := conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); !strings.Contains(says, "every member with HashKV 42") {
		t.Errorf("the completion says %q, not what every member holds", says)
	}
	reconcileRestore(t, r, rs)
	left := &batchv1.JobList{}
	if err := k8s.List(t.Context(), left, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	for _, job := range left.Items {
		if job.DeletionTimestamp.IsZero() {
			t.Errorf("Job %s left after the restore completed", job.Name)
		}
	}
}

// Every Job falls back on its own to an older snapshot when the one asked for is missing: a
// snapshot deleted while they ran could have members restored from different snapshots, which
// would start one cluster whose members disagree on its data. The restore fails and deletes the
// cluster it made, which never held data.
func TestMembersRestoredFromDifferentSnapshotsNeverForm(t *testing.T) {
	rs := newClusterRestore(3)
	r, k8s := restoreReconciler(t, rs, readWithACloudIdentity(rs))
	rs = reconcileRestore(t, r, rs)
	jobs := restoreJobsOfTest(t, k8s, rs, 3)
	for i, job := range jobs {
		result := &agent.RestoreResult{URI: "s3://b/snap.db", SizeBytes: 1, SHA256: "abc", Revision: 42}
		if i == 2 {
			result = &agent.RestoreResult{URI: "s3://b/older.db", SizeBytes: 1, SHA256: "def", Revision: 30, Missing: "s3://b/snap.db"}
		}
		completeRestoreJob(t, k8s, job, agent.Report{Restore: result})
	}
	rs = reconcileRestore(t, r, rs)
	if rs.Status.Phase != etcdv1alpha1.RestoreFailed || !strings.Contains(conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded), "older.db") {
		t.Fatalf("restore %s: %s; want it failed, naming the other snapshot", rs.Status.Phase, conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
	}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "copy"}, &etcdv1alpha1.EtcdCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("the cluster made for the restore: %v, want it deleted", err)
	}
}

// A restore completes only once every member of its cluster serves the same restored store,
// read live from etcd: the same HashKV, compact revision and key count at the revision the
// restored data starts from. While one member differs, or has not answered, the restore waits
// and says why, with a Warning event naming the members that differ.
func TestARestoreCompletesOnlyWhenEveryMemberHoldsTheSameStore(t *testing.T) {
	rs := newClusterRestore(3)
	rs.Status = etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring, RestoredRevision: ptr.To[int64](42), RevisionBump: 5000000}
	target := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: "ns", UID: "copy-uid", Annotations: map[string]string{resources.AnnotationRestoredBy: rs.Name}},
		Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16"},
		Status: etcdv1alpha1.EtcdClusterStatus{ClusterID: "new", ReadyMembers: 3,
			Conditions: []metav1.Condition{{Type: etcdv1alpha1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: "QuorumHealthy", LastTransitionTime: metav1.Now()}}},
	}
	r, _ := restoreReconciler(t, rs, target)
	recorder := events.NewFakeRecorder(10)
	r.Recorder = recorder
	digest := etcd.KeyspaceDigest{Hash: 42, CompactRevision: 5000042, Keys: 7}
	var asked []int64
	answers := map[string]etcd.KeyspaceDigest{"copy-a": digest, "copy-b": digest, "copy-c": {Hash: 43, CompactRevision: 5000042, Keys: 7}}
	r.Keyspaces = func(_ context.Context, _ *etcdv1alpha1.EtcdCluster, revision int64) (map[string]etcd.KeyspaceDigest, error) {
		asked = append(asked, revision)
		return answers, nil
	}

	rs = reconcileRestore(t, r, rs)
	cond := meta.FindStatusCondition(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded)
	if rs.Status.Phase == etcdv1alpha1.RestoreCompleted || cond == nil || cond.Reason != etcdv1alpha1.ReasonRestoredDataDiffers || !strings.Contains(cond.Message, "copy-c has HashKV 43") {
		t.Fatalf("with member copy-c's store different: restore %s, %v; want it waiting with reason %s naming copy-c", rs.Status.Phase, cond, etcdv1alpha1.ReasonRestoredDataDiffers)
	}
	if !slices.Equal(asked, []int64{5000042}) {
		t.Errorf("asked for the keyspace at revisions %v, want the restored data's first, 42 + 5000000", asked)
	}
	select {
	case e := <-recorder.Events:
		if !strings.HasPrefix(e, "Warning "+etcdv1alpha1.ReasonRestoredDataDiffers) || !strings.Contains(e, "copy-c") {
			t.Errorf("event %q, want a Warning naming copy-c", e)
		}
	default:
		t.Error("no event said the members differ")
	}

	delete(answers, "copy-c")
	rs = reconcileRestore(t, r, rs)
	if rs.Status.Phase == etcdv1alpha1.RestoreCompleted {
		t.Fatalf("completed with one member of three silent: %s", conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
	}

	answers["copy-c"] = digest
	rs = reconcileRestore(t, r, rs)
	if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
		t.Fatalf("every member the same: restore %s, %s", rs.Status.Phase, conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
	}
}

// An in-place restore of a cluster of three from a snapshot in S3 stages all three restored
// members at once, while the old cluster serves: a claim and a Job each, the claims the
// restore's and not yet the cluster's, every one planning the same bootstrap. At the cut-over
// every claim becomes the cluster's, so that its reconciler starts the three together. A
// restore that fails before the cut-over deletes every claim it staged. Before, one seed
// member was staged and the others joined the restored cluster as learners, receiving the
// whole snapshot from it.
func TestAnInPlaceRestorePreparesEveryMemberAtOnce(t *testing.T) {
	rs := inPlaceRestore("all")
	rs.Spec.RevisionBump = "5000000"
	c := formedCluster(nil)
	c.Spec.Size, c.Status.ReadyMembers, c.Status.ClusterID = 3, 3, "old"
	r, k8s := restoreReconciler(t, rs, c, readWithACloudIdentity(rs))
	rs = reconcileRestore(t, r, rs) // holds the cluster, stages the claims, starts the Jobs

	members := resources.RestoreMemberNames(c.Name, string(rs.UID), 3)
	wantInitial := resources.InitialCluster(c, members)
	staged := func(member string) *corev1.PersistentVolumeClaim {
		t.Helper()
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(member)}, pvc); err != nil {
			t.Fatalf("claim of member %s: %v", member, err)
		}
		return pvc
	}
	jobs := restoreJobsOfTest(t, k8s, rs, 3)
	for i, job := range jobs {
		expectRestoresMember(t, job, members[i], wantInitial)
		pvc := staged(members[i])
		if pvc.Labels[resources.LabelCluster] != "" || pvc.Labels[resources.LabelRestore] != rs.Name {
			t.Errorf("claim %s is labelled %v before the cut-over, want the restore's and not the cluster's", pvc.Name, pvc.Labels)
		}
		if got := pvc.Annotations[resources.AnnotationInitialCluster]; got != wantInitial {
			t.Errorf("claim %s plans the bootstrap %s, want every restored member's: %s", pvc.Name, got, wantInitial)
		}
	}

	report := agent.Report{Restore: &agent.RestoreResult{URI: "s3://b/snap.db", SizeBytes: 1, SHA256: "abc", Revision: 42}}
	for _, job := range jobs {
		completeRestoreJob(t, k8s, job, report)
	}
	rs = reconcileRestore(t, r, rs) // records what was restored
	reconcileRestore(t, r, rs)      // cuts over
	live := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), live); err != nil {
		t.Fatal(err)
	}
	if live.Annotations[resources.AnnotationRestoreSeed] != members[0] {
		t.Fatalf("cluster annotations %v: want the cut-over to seed %s", live.Annotations, members[0])
	}
	for _, member := range members {
		if pvc := staged(member); pvc.Labels[resources.LabelCluster] != c.Name {
			t.Errorf("after the cut-over claim %s is labelled %v, want the cluster's", pvc.Name, pvc.Labels)
		}
	}
}

// A failed in-place restore leaves the cluster as it was: every claim it staged goes (three, of
// a snapshot in S3).
func TestAFailedInPlaceRestoreDeletesEveryClaimItStaged(t *testing.T) {
	rs := inPlaceRestore("fails")
	rs.Spec.RevisionBump = "5000000"
	c := formedCluster(nil)
	c.Spec.Size, c.Status.ReadyMembers, c.Status.ClusterID = 3, 3, "old"
	r, k8s := restoreReconciler(t, rs, c, readWithACloudIdentity(rs))
	rs = reconcileRestore(t, r, rs)
	jobs := restoreJobsOfTest(t, k8s, rs, 3)
	jobs[1].Status = batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}}
	if err := k8s.Status().Update(t.Context(), jobs[1]); err != nil {
		t.Fatal(err)
	}
	rs = reconcileRestore(t, r, rs)
	if rs.Status.Phase != etcdv1alpha1.RestoreFailed {
		t.Fatalf("restore %s with a Job failed: %s", rs.Status.Phase, conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
	}
	claims := &corev1.PersistentVolumeClaimList{}
	if err := k8s.List(t.Context(), claims, client.InNamespace("ns")); err != nil {
		t.Fatal(err)
	}
	for _, pvc := range claims.Items {
		if pvc.DeletionTimestamp.IsZero() {
			t.Errorf("claim %s staged by the failed restore is left", pvc.Name)
		}
	}
}

// A restore goes on once its Jobs' pods have succeeded, not seconds later when Kubernetes' Job
// controller marks the Jobs Complete: the data is written and the reports are there. A Job
// whose pod failed is not taken for done (it may be retried), nor one with no pod yet.
func TestARestoreGoesOnOnceItsJobsPodsHaveSucceeded(t *testing.T) {
	rs := newClusterRestore(3)
	sa := readWithACloudIdentity(rs)
	r, k8s, rs, target := startClusterRestore(t, rs, sa)
	jobs := restoreJobsOfTest(t, k8s, rs, 3)
	report := agent.Report{Restore: &agent.RestoreResult{URI: "s3://b/snap.db", SizeBytes: 1, SHA256: "abc", Revision: 42}}
	succeedRestorePod(t, k8s, jobs[0], report)
	succeedRestorePod(t, k8s, jobs[1], report)
	failed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: jobs[2].Name + "-failed", Namespace: "ns",
		Labels: map[string]string{batchv1.JobNameLabel: jobs[2].Name, resources.LabelManagedBy: "etcd-operator"}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	if err := ctrl.SetControllerReference(jobs[2], failed, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(t.Context(), failed); err != nil {
		t.Fatal(err)
	}
	rs = reconcileRestore(t, r, rs)
	if rs.Status.Phase != etcdv1alpha1.RestoreRestoring || rs.Status.RestoredRevision != nil {
		t.Fatalf("with one Job's pod failed (the Job not failed) the restore is %s at revision %d; want it Restoring, nothing recorded",
			rs.Status.Phase, ptr.Deref(rs.Status.RestoredRevision, 0))
	}
	succeedRestorePod(t, k8s, jobs[2], report) // the retry: newer, as its name sorts

	rs = reconcileRestore(t, r, rs) // records what was restored
	rs = reconcileRestore(t, r, rs) // lets the cluster form
	if ptr.Deref(rs.Status.RestoredRevision, 0) != 42 {
		t.Errorf("restored revision %d, want 42 from the succeeded pods' reports", ptr.Deref(rs.Status.RestoredRevision, 0))
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(target), target); err != nil || target.Annotations[resources.AnnotationRestorePending] != "" {
		t.Fatalf("every member's pod succeeded, the cluster is still held (%v)", err)
	}
}

// A snapshot on a claim is restored into the seed member alone, and the cluster grows from it:
// every member's Job would mount the one backup claim, which on a node-local volume lives on
// one node, so every Job would run there and bind there every member's new claim, of which it
// is the first consumer; on a network volume the Jobs would fail to attach it beside each
// other. One Job, one claim planning a cluster of one; the cluster forms from it, its own
// scale-up adds the others as learners, and the restore completes once it serves at its size
// with every member holding the same store. Before, the restore made a Job and a claim for
// each of the three members, all mounting the backup claim.
func TestARestoreFromAClaimIntoANewClusterPreparesTheSeedAlone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		source func(rs *etcdv1alpha1.EtcdRestore) []client.Object
	}{
		{"location.pvc", func(*etcdv1alpha1.EtcdRestore) []client.Object { return nil }},
		{"an EtcdBackup to a claim", func(rs *etcdv1alpha1.EtcdRestore) []client.Object {
			backup, _ := nightlyWithThreeSnapshots()
			rs.Spec.Source = etcdv1alpha1.RestoreSource{Backup: &etcdv1alpha1.BackupReference{Name: backup.Name}}
			return []client.Object{backup}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := newClusterRestore(3)
			r, k8s, rs, target := startClusterRestore(t, rs, tc.source(rs)...)
			seed := resources.SeedMemberName("copy", string(rs.UID))
			wantInitial := resources.InitialCluster(target, []string{seed})
			job := expectSeedAloneStaged(t, k8s, rs, seed, wantInitial)
			if got := argOf(job, "--bump-revision"); got != "5000000" {
				t.Errorf("Job %s bumps by %q, want 5000000", job.Name, got)
			}

			report := agent.Report{Restore: &agent.RestoreResult{URI: "pvc://backups/snap.db", SizeBytes: 1, SHA256: "abc", Revision: 42}}
			completeRestoreJob(t, k8s, job, report)
			rs = reconcileRestore(t, r, rs) // records what was restored
			rs = reconcileRestore(t, r, rs) // lets the cluster form
			if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(target), target); err != nil || target.Annotations[resources.AnnotationRestorePending] != "" {
				t.Fatalf("the seed restored, the cluster is still held (%v)", err)
			}
			if says := conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); !strings.Contains(says, "forms from them and grows to 3") {
				t.Errorf("the restore says %q, not that the cluster grows from the seed to 3", says)
			}
			expectSeedAloneStaged(t, k8s, rs, seed, wantInitial)

			// The cluster's reconciler has added the others as learners: it serves at its size.
			markServing(t, k8s, target, 3)
			rs = reconcileRestore(t, r, rs)
			if rs.Status.Phase != etcdv1alpha1.RestoreCompleted || ptr.Deref(rs.Status.RestoredRevision, 0) != 42 {
				t.Fatalf("restore %s at revision %d: %s", rs.Status.Phase, ptr.Deref(rs.Status.RestoredRevision, 0), conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
			}
			if says := conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); !strings.Contains(says, "with 3 members, every member with HashKV 42") {
				t.Errorf("the completion says %q, not that its 3 members hold the same store", says)
			}
		})
	}
}

// An in-place restore of a cluster of three from a snapshot on a claim stages the seed member
// alone, for the same reason as into a new cluster: one Job and one claim, the restore's, planning
// a cluster of one. At the cut-over that claim becomes the cluster's, which restarts from it and
// grows back to its size; the restore completes once it serves at its size with every member
// holding the same store. Before, the restore staged a claim and a Job for each of the three
// members, all mounting the backup claim.
func TestAnInPlaceRestoreFromAClaimStagesTheSeedAlone(t *testing.T) {
	rs := inPlaceRestore("seed")
	rs.Spec.RevisionBump = "5000000"
	c := formedCluster(nil)
	c.Spec.Size, c.Status.ReadyMembers, c.Status.ClusterID = 3, 3, "old"
	r, k8s := restoreReconciler(t, rs, c)
	rs = reconcileRestore(t, r, rs) // holds the cluster, stages the seed's claim, starts its Job

	seed := resources.SeedMemberName(c.Name, string(rs.UID))
	wantInitial := resources.InitialCluster(c, []string{seed})
	job := expectSeedAloneStaged(t, k8s, rs, seed, wantInitial)
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(seed)}, pvc); err != nil {
		t.Fatal(err)
	}
	if pvc.Labels[resources.LabelCluster] != "" || pvc.Labels[resources.LabelRestore] != rs.Name {
		t.Errorf("claim %s is labelled %v before the cut-over, want the restore's and not the cluster's", pvc.Name, pvc.Labels)
	}

	completeRestoreJob(t, k8s, job, agent.Report{Restore: &agent.RestoreResult{URI: "pvc://backups/snap.db", SizeBytes: 1, SHA256: "abc", Revision: 42}})
	rs = reconcileRestore(t, r, rs) // records what was restored
	rs = reconcileRestore(t, r, rs) // cuts over
	live := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(c), live); err != nil {
		t.Fatal(err)
	}
	if live.Annotations[resources.AnnotationRestoreSeed] != seed {
		t.Fatalf("cluster annotations %v: want the cut-over to seed %s", live.Annotations, seed)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(pvc), pvc); err != nil || pvc.Labels[resources.LabelCluster] != c.Name {
		t.Errorf("after the cut-over claim %s is labelled %v (%v), want the cluster's", pvc.Name, pvc.Labels, err)
	}
	if says := conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); !strings.Contains(says, "grows to 3") {
		t.Errorf("the restore says %q, not that the cluster grows from the seed to 3", says)
	}
	expectSeedAloneStaged(t, k8s, rs, seed, wantInitial)

	// The cluster restarted from the seed and grew back: it serves at its size, a new cluster.
	markServing(t, k8s, live, 3)
	rs = reconcileRestore(t, r, rs)
	if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
		t.Fatalf("restore %s: %s", rs.Status.Phase, conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
	}
	if says := conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); !strings.Contains(says, "with 3 members, in place") || !strings.Contains(says, "every member with HashKV 42") {
		t.Errorf("the completion says %q, not that its 3 members hold the same store", says)
	}
}

// Only a snapshot on a claim is prepared in the seed alone: a claim lives on one node, or
// attaches to one at a time, and every member's Job would mount it; a snapshot in S3 is read
// from anywhere, however it is read, and every member is prepared from it at once.
func TestOnlyASnapshotOnAClaimIsPreparedInTheSeedAlone(t *testing.T) {
	claim := etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups", SubPath: "snapshots"}}
	bucket := func(s3 etcdv1alpha1.S3Location) etcdv1alpha1.StorageLocation {
		s3.Bucket = "b"
		return etcdv1alpha1.StorageLocation{S3: &s3}
	}
	fallbacks := []jobspec.Snapshot{{Key: "older.db", SHA256: "def"}}
	for _, tc := range []struct {
		name string
		src  resources.RestoreSource
		want bool
	}{
		{"S3, a Secret's credentials, sha256", resources.RestoreSource{Storage: bucket(etcdv1alpha1.S3Location{CredentialsSecretName: "creds"}), SHA256: "abc"}, false},
		{"S3, no sha256", resources.RestoreSource{Storage: bucket(etcdv1alpha1.S3Location{CredentialsSecretName: "creds"})}, false},
		{"S3, a ServiceAccount's identity", resources.RestoreSource{Storage: bucket(etcdv1alpha1.S3Location{ServiceAccountName: "reader"}), SHA256: "abc"}, false},
		{"S3, older snapshots to fall back to", resources.RestoreSource{Storage: bucket(etcdv1alpha1.S3Location{CredentialsSecretName: "creds"}), SHA256: "abc", Fallbacks: fallbacks}, false},
		{"a claim", resources.RestoreSource{Storage: claim}, true},
		{"a claim, sha256", resources.RestoreSource{Storage: claim, SHA256: "abc"}, true},
		{"a claim, older snapshots to fall back to", resources.RestoreSource{Storage: claim, SHA256: "abc", Fallbacks: fallbacks}, true},
	} {
		if got := preparesSeedAlone(snapshotSource{RestoreSource: tc.src}); got != tc.want {
			t.Errorf("%s: prepares the seed alone %v, want %v", tc.name, got, tc.want)
		}
	}
}

// expectSeedAloneStaged checks that the restore made one Job, restoring seed as the only member
// of initialCluster, and one claim, the seed's, planning that bootstrap; it returns the Job.
func expectSeedAloneStaged(t *testing.T, k8s client.Client, rs *etcdv1alpha1.EtcdRestore, seed, initialCluster string) *batchv1.Job {
	t.Helper()
	jobs := &batchv1.JobList{}
	if err := k8s.List(t.Context(), jobs, client.InNamespace(rs.Namespace)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, job := range jobs.Items {
		names = append(names, job.Name)
	}
	if len(jobs.Items) != 1 || jobs.Items[0].Name != resources.RestoreJobName(rs.Name, 0) {
		t.Fatalf("restore Jobs %v, want the seed's alone, %s", names, resources.RestoreJobName(rs.Name, 0))
	}
	job := &jobs.Items[0]
	expectRestoresMember(t, job, seed, initialCluster)
	claims := &corev1.PersistentVolumeClaimList{}
	if err := k8s.List(t.Context(), claims, client.InNamespace(rs.Namespace)); err != nil {
		t.Fatal(err)
	}
	names = nil
	for _, pvc := range claims.Items {
		names = append(names, pvc.Name)
	}
	if len(claims.Items) != 1 || claims.Items[0].Name != resources.PVCName(seed) {
		t.Fatalf("claims %v, want the seed's alone, %s", names, resources.PVCName(seed))
	}
	if got := claims.Items[0].Annotations[resources.AnnotationInitialCluster]; got != initialCluster || claims.Items[0].Annotations[resources.AnnotationClusterState] != "new" {
		t.Errorf("claim %s plans the bootstrap %s (%s), want the seed's alone, new: %s", claims.Items[0].Name, got, claims.Items[0].Annotations[resources.AnnotationClusterState], initialCluster)
	}
	return job
}

// markServing has the cluster's status say it serves with size ready members, as its
// reconciler would.
func markServing(t *testing.T, k8s client.Client, target *etcdv1alpha1.EtcdCluster, size int32) {
	t.Helper()
	target.Status = etcdv1alpha1.EtcdClusterStatus{ClusterID: "new", ReadyMembers: size,
		Conditions: []metav1.Condition{{Type: etcdv1alpha1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: "QuorumHealthy", LastTransitionTime: metav1.Now()}}}
	if err := k8s.Status().Update(t.Context(), target); err != nil {
		t.Fatal(err)
	}
}

// startClusterRestore reconciles a restore into a new cluster once, beside objects (what its
// source names): it creates the cluster, held, and its members' claims and Jobs. It returns the
// restore and the cluster as made.
func startClusterRestore(t *testing.T, rs *etcdv1alpha1.EtcdRestore, objects ...client.Object) (*EtcdRestoreReconciler, client.Client, *etcdv1alpha1.EtcdRestore, *etcdv1alpha1.EtcdCluster) {
	t.Helper()
	r, k8s := restoreReconciler(t, append([]client.Object{rs}, objects...)...)
	rs = reconcileRestore(t, r, rs)
	target := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: rs.Spec.Target.ClusterName}, target); err != nil {
		t.Fatalf("the target cluster: %v", err)
	}
	return r, k8s, rs, target
}

// A snapshot of a cluster never written to is at revision 0 as the restore Jobs read it (its
// store holds no key yet). Recorded, the cluster goes on to form from it: a restore that took
// revision 0 for "nothing recorded yet" recorded it again every second and never went on.
func TestARestoreOfASnapshotAtRevisionZeroGoesOn(t *testing.T) {
	rs := newClusterRestore(3)
	r, k8s, rs, target := startClusterRestore(t, rs, readWithACloudIdentity(rs))
	report := agent.Report{Restore: &agent.RestoreResult{URI: "s3://b/snap.db", SizeBytes: 1, SHA256: "abc", Revision: 0}}
	for _, job := range restoreJobsOfTest(t, k8s, rs, 3) {
		succeedRestorePod(t, k8s, job, report)
	}
	rs = reconcileRestore(t, r, rs) // records what was restored
	rs = reconcileRestore(t, r, rs) // lets the cluster form
	if rs.Status.RestoredRevision == nil || *rs.Status.RestoredRevision != 0 {
		t.Fatalf("restored revision %v, want 0 recorded", rs.Status.RestoredRevision)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(target), target); err != nil || target.Annotations[resources.AnnotationRestorePending] != "" {
		t.Fatalf("every member restored a snapshot at revision 0, the cluster is still held (%v)", err)
	}
}
