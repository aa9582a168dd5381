package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/agent"
	"github.com/etcd-database/etcd-operator/internal/jobspec"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// s3ClusterRestore is a restore into a new cluster of size members of one snapshot in S3,
// named by its sha256: one its members can restore in their own pods.
func s3ClusterRestore(size int32) (*etcdv1alpha1.EtcdRestore, *corev1.Secret) {
	rs := newClusterRestore(size)
	rs.Spec.Source.Location = &etcdv1alpha1.SnapshotLocation{
		StorageLocation: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{Bucket: "b", Endpoint: "http://s3.test", CredentialsSecretName: "creds"}},
		Key:             "snap.db", SHA256: strings.Repeat("a", 64),
	}
	return rs, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "ns"}}
}

// memberPodRestored is a member's pod whose restore containers ended as the kubelet records
// them: the fetch with its report, the install with exit code install (-1: not run yet).
func memberPodRestored(member string, fetch agent.Report, fetchExit, install int32) *corev1.Pod {
	statuses := []corev1.ContainerStatus{{Name: resources.MemberRestoreFetchContainer,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: fetchExit, Message: string(fetch.Encode())}}}}
	if fetchExit != 0 {
		// Restarted by the kubelet: the failure is the last termination.
		statuses[0].LastTerminationState, statuses[0].State = statuses[0].State, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	}
	if install >= 0 {
		statuses = append(statuses, corev1.ContainerStatus{Name: resources.MemberRestoreInstallContainer,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: install, Message: "{}"}}})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: member, Namespace: "ns"},
		Status:     corev1.PodStatus{InitContainerStatuses: statuses},
	}
}

// A restore into a new cluster from one snapshot named by its sha256 restores its members in
// their own pods: no Job. Each member's claim carries the same restore (every member, the one
// revision bump, the agent image), and the cluster is let form at once. The restore records
// what the members' pods restored once every one has, completes once the cluster serves, and
// then takes the restore off the claims.
func TestARestoreIntoANewClusterRestoresItsMembersInTheirOwnPods(t *testing.T) {
	rs, creds := s3ClusterRestore(3)
	r, k8s := restoreReconciler(t, rs, creds)
	rs = reconcileRestore(t, r, rs) // creates the cluster, its members' claims, and lets it form
	target := &etcdv1alpha1.EtcdCluster{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "copy"}, target); err != nil {
		t.Fatal(err)
	}
	if held := target.Annotations[resources.AnnotationRestorePending]; held != "" {
		t.Fatalf("the cluster is held (%s): its members restore in their own pods, it forms at once", held)
	}
	jobs := &batchv1.JobList{}
	if err := k8s.List(t.Context(), jobs, client.InNamespace("ns")); err != nil || len(jobs.Items) > 0 {
		t.Fatalf("restore Jobs made: %d (%v)", len(jobs.Items), err)
	}
	members := resources.RestoreMemberNames("copy", string(rs.UID), 3)
	for _, m := range members {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(m)}, pvc); err != nil {
			t.Fatalf("claim of member %s: %v", m, err)
		}
		restore, err := resources.MemberRestoreOf(pvc)
		if err != nil || restore == nil {
			t.Fatalf("claim %s names no restore (%v)", pvc.Name, err)
		}
		if restore.Restore != rs.Name || restore.AgentImage != r.AgentImage || strings.Join(restore.Members, ",") != strings.Join(members, ",") ||
			restore.Source.RevisionBump != 5000000 || restore.Source.SHA256 != rs.Spec.Source.Location.SHA256 || restore.Source.Key != "snap.db" {
			t.Errorf("claim %s: restore %+v; want every member's, bumped by 5000000, of snap.db", pvc.Name, restore)
		}
	}

	// Two members restored, the third still fetching: nothing recorded, the restore waits.
	report := agent.Report{Restore: &agent.RestoreResult{URI: "s3://b/snap.db", SizeBytes: 1, SHA256: rs.Spec.Source.Location.SHA256, Revision: 42}}
	for _, m := range members[:2] {
		if err := k8s.Create(t.Context(), memberPodRestored(m, report, 0, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := k8s.Create(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: members[2], Namespace: "ns"}}); err != nil {
		t.Fatal(err)
	}
	rs = reconcileRestore(t, r, rs)
	if rs.Status.RestoredRevision != nil {
		t.Fatalf("recorded revision %d with one member still restoring", ptr.Deref(rs.Status.RestoredRevision, 0))
	}
	if says := conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); !strings.Contains(says, "2 of 3 done") {
		t.Errorf("the restore says %q, not how far its members are", says)
	}
	// A member that never gets its data is waited for as a cluster that does not serve.
	now := r.Now
	r.Now = func() time.Time { return now().Add(restoreServeDeadline + time.Minute) }
	if late := reconcileRestore(t, r, rs); !restoreNotServing(late) || late.Status.Phase != etcdv1alpha1.RestoreRestoring {
		t.Errorf("a member still restoring after %s: %s %s, want the restore waiting, ClusterNotServing", restoreServeDeadline,
			late.Status.Phase, conditionText(late.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
	}
	r.Now = now
	third := &corev1.Pod{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: members[2]}, third); err != nil {
		t.Fatal(err)
	}
	third.Status = memberPodRestored(members[2], report, 0, 0).Status
	if err := k8s.Status().Update(t.Context(), third); err != nil {
		t.Fatal(err)
	}
	rs = reconcileRestore(t, r, rs)
	if ptr.Deref(rs.Status.RestoredRevision, 0) != 42 || rs.Status.RevisionBump != 5000000 || rs.Status.SnapshotURI != "s3://b/snap.db" {
		t.Fatalf("status %+v; want revision 42 of s3://b/snap.db, bumped by 5000000", rs.Status)
	}

	markServing(t, k8s, target, 3)
	rs = reconcileRestore(t, r, rs)
	if rs.Status.Phase != etcdv1alpha1.RestoreCompleted {
		t.Fatalf("restore %s: %s", rs.Status.Phase, conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
	}
	reconcileRestore(t, r, rs)
	for _, m := range members {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(m)}, pvc); err != nil {
			t.Fatal(err)
		}
		if _, ok := pvc.Annotations[resources.AnnotationMemberRestore]; ok {
			t.Errorf("claim %s still names the completed restore", pvc.Name)
		}
	}
}

// A member's fetch that fails for good fails the restore. While no member has installed the
// data no etcd ran, and the cluster, which never held data, is deleted; once one has, it may
// have served, and the cluster is left for the user. So it is when something answers at a
// member's address, asked live, though no pod's status (read from the cache) says so yet.
func TestAMemberPodsFailedRestoreFailsTheRestore(t *testing.T) {
	refused := agent.Report{Error: "s3://b/snap.db is 10 bytes with sha256 x, not the recorded aaa", Permanent: true, Unrestorable: true}
	restored := agent.Report{Restore: &agent.RestoreResult{URI: "s3://b/snap.db", SHA256: strings.Repeat("a", 64), Revision: 42}}
	for _, tc := range []struct {
		name             string
		othersInstalled  bool
		answers          bool
		wantClusterKept  bool
		wantMessagePiece string
	}{
		{name: "before any member installed the data", wantMessagePiece: "which never held data, was deleted"},
		{name: "after a member installed it", othersInstalled: true, wantClusterKept: true, wantMessagePiece: "was left as it is"},
		{name: "with a member answering that no pod's status says started", answers: true, wantClusterKept: true, wantMessagePiece: "answers at 10.0.0.9:2379"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, creds := s3ClusterRestore(3)
			r, k8s := restoreReconciler(t, rs, creds)
			if tc.answers {
				r.ProbeAddresses = func(context.Context, []string) string { return "10.0.0.9:2379" }
			}
			rs = reconcileRestore(t, r, rs)
			members := resources.RestoreMemberNames("copy", string(rs.UID), 3)
			pods := []*corev1.Pod{memberPodRestored(members[0], refused, jobspec.ExitPermanent, -1)}
			for _, m := range members[1:] {
				if tc.othersInstalled {
					pods = append(pods, memberPodRestored(m, restored, 0, 0))
				} else {
					pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: m, Namespace: "ns"}})
				}
			}
			for _, p := range pods {
				if err := k8s.Create(t.Context(), p); err != nil {
					t.Fatal(err)
				}
			}
			rs = reconcileRestore(t, r, rs)
			if rs.Status.Phase != etcdv1alpha1.RestoreFailed {
				t.Fatalf("restore %s, want Failed: %s", rs.Status.Phase, conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded))
			}
			if says := conditionText(rs.Status.Conditions, etcdv1alpha1.ConditionSucceeded); !strings.Contains(says, "not the recorded") || !strings.Contains(says, tc.wantMessagePiece) {
				t.Errorf("the failure says %q; want the member's error and %q", says, tc.wantMessagePiece)
			}
			err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "copy"}, &etcdv1alpha1.EtcdCluster{})
			if kept := err == nil; kept != tc.wantClusterKept || (err != nil && !apierrors.IsNotFound(err)) {
				t.Errorf("cluster kept: %v (%v), want %v", kept, err, tc.wantClusterKept)
			}
		})
	}
}

// Jobs still prepare the members when their pods could not be sure to restore the same bytes
// (no sha256, or a fallback to another snapshot), or could not read them as themselves (a
// ServiceAccount's cloud identity, a claim).
func TestRestoresMemberPodsCannotBeSureOfStayWithJobs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(*etcdv1alpha1.SnapshotLocation)
	}{
		{"no sha256", func(l *etcdv1alpha1.SnapshotLocation) { l.SHA256 = "" }},
		{"a cloud identity", func(l *etcdv1alpha1.SnapshotLocation) {
			l.S3.CredentialsSecretName, l.S3.ServiceAccountName = "", "reader"
		}},
		{"a claim", func(l *etcdv1alpha1.SnapshotLocation) {
			l.StorageLocation = etcdv1alpha1.StorageLocation{PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, creds := s3ClusterRestore(1)
			tc.tweak(rs.Spec.Source.Location)
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: "ns"}}
			r, k8s := restoreReconciler(t, rs, creds, sa)
			restoreJobOf(t, k8s, reconcileRestore(t, r, rs))
		})
	}
}

// The cluster's reconciler makes the pods of members whose claims carry a restore with the
// restore's init containers, and its fetch with the operator's proxy settings: when it starts
// them, and when it makes a lost pod again. Members with no restore on their claims get none.
func TestMembersWhoseClaimsCarryARestoreRestoreInTheirPods(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: "ns", UID: "uid"}, Spec: etcdv1alpha1.EtcdClusterSpec{Size: 2, Version: "3.6.16"}}
	members := []string{"copy-aaaaa", "copy-bbbbb"}
	restore := resources.MemberRestore{Restore: "r", AgentImage: "registry.test/agent", Members: members,
		Source: resources.RestoreSource{Key: "snap.db", SHA256: "abc", Storage: etcdv1alpha1.StorageLocation{S3: &etcdv1alpha1.S3Location{Bucket: "b", CredentialsSecretName: "creds"}}}}
	obs := &observation{pods: map[string]*corev1.Pod{}, pvcs: map[string]*corev1.PersistentVolumeClaim{}}
	for i, m := range members {
		pvc := resources.MemberPVC(c, resources.MemberSpec{Name: m, InitialCluster: resources.InitialCluster(c, members), State: "new"})
		if i == 0 {
			pvc.Annotations[resources.AnnotationMemberRestore] = resources.MemberRestoreAnnotation(restore)
		}
		obs.pvcs[m] = pvc
	}
	proxy := corev1.EnvVar{Name: "HTTPS_PROXY", Value: "http://proxy:3128"}
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()
	r := &EtcdClusterReconciler{Client: k8s, Pods: resources.PodSettings{Env: []corev1.EnvVar{proxy}}, DefaultImages: resources.EtcdImages{Repository: "registry.test/etcd"}}

	expectPods := func(t *testing.T, what string) {
		t.Helper()
		for i, m := range members {
			pod := &corev1.Pod{}
			if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: m}, pod); err != nil {
				t.Fatalf("%s: pod %s: %v", what, m, err)
			}
			if restored := len(pod.Spec.InitContainers) == 2 && slices.Contains(pod.Spec.InitContainers[0].Env, proxy); restored != (i == 0) {
				t.Errorf("%s: pod %s restores its data: %v, want %v (init containers %v)", what, m, restored, i == 0, pod.Spec.InitContainers)
			}
			if err := k8s.Delete(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.createBootstrapMembers(t.Context(), c, obs, members); err != nil {
		t.Fatal(err)
	}
	expectPods(t, "started")
	if err := r.restartMembers(t.Context(), c, obs, members); err != nil {
		t.Fatal(err)
	}
	expectPods(t, "made again")
}

// A member whose pod is still restoring its data has an IP but no etcd yet: the cluster's
// reconciler does not dial it, which cost each look at the forming cluster the 5 s call
// timeout (seen in BenchmarkRestoreToAvailable's log: no look at the cluster between its
// members' restores and their readiness). Once its init containers have succeeded it is dialled.
func TestAMemberStillRestoringInItsPodIsNotDialled(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "copy", Namespace: "ns"}}
	pod := memberPodRestored("copy-aaaaa", agent.Report{}, 0, -1)
	pod.Status.PodIP = "10.0.0.1"
	pod.Status.InitContainerStatuses = append(pod.Status.InitContainerStatuses, corev1.ContainerStatus{Name: resources.MemberRestoreInstallContainer,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	obs := &observation{pods: map[string]*corev1.Pod{pod.Name: pod}}
	if urls := knownClientURLs(c, obs); len(urls) != 0 {
		t.Errorf("dials %v while the member restores its data", urls)
	}
	pod.Status.InitContainerStatuses[1].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	if urls := knownClientURLs(c, obs); len(urls) != 1 {
		t.Errorf("dials %v once the member's data is in place, want its URL", urls)
	}
}
