package controllers

import (
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// lostMajority is a three-member cluster, reconciled once while whole, whose members m0001 and
// m0002 then lost their pods and claims for good: etcd has no quorum, and m0000 answers its
// own status only.
func lostMajority(t *testing.T, policy etcdv1alpha1.QuorumLossRecoveryPolicy) *scriptedCluster {
	t.Helper()
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: policy, After: &metav1.Duration{}}
	}, nil)
	a.reconcile(t, 1)
	a.loseForGood(t, a.members[1:])
	a.quorumLostFor(t, membership.MinRecoveryAfter)
	return a
}

// quorumLostFor records in status that the operator found the quorum lost d ago.
func (a *scriptedCluster) quorumLostFor(t *testing.T, d time.Duration) {
	t.Helper()
	c := &etcdv1alpha1.EtcdCluster{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), c); err != nil {
		t.Fatal(err)
	}
	c.Status.QuorumLostTime = &metav1.Time{Time: time.Now().Add(-d).Truncate(time.Second)}
	if err := a.k8s.Status().Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

// loseForGood deletes the pods and claims of members, which stop answering: etcd has no quorum.
func (a *scriptedCluster) loseForGood(t *testing.T, members []string) {
	t.Helper()
	for _, name := range members {
		for _, obj := range []client.Object{
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}},
			&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: resources.PVCName(name)}},
		} {
			if err := a.k8s.Delete(t.Context(), obj); err != nil {
				t.Fatal(err)
			}
		}
		delete(a.etcd.Statuses, resources.ClientURL(a.cluster, name))
	}
	a.etcd.NoQuorum = true
}

func (a *scriptedCluster) pod(t *testing.T, name string) (*corev1.Pod, bool) {
	t.Helper()
	pod := &corev1.Pod{}
	err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: name}, pod)
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	return pod, err == nil
}

// finishPreserveJob makes the copy Job succeed with report, as the agent's pod would.
func (a *scriptedCluster) finishPreserveJob(t *testing.T, member string, succeeded bool, report string) {
	t.Helper()
	a.finishAgentJob(t, resources.PreserveDataJobName(member), resources.PreserveDataContainer, succeeded, report)
}

// finishAgentJob ends the agent Job name, its container reporting report, as its pod would.
func (a *scriptedCluster) finishAgentJob(t *testing.T, name, container string, succeeded bool, report string) {
	t.Helper()
	job := &batchv1.Job{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: name}, job); err != nil {
		t.Fatalf("Job %s: %v", name, err)
	}
	condition := batchv1.JobComplete
	if !succeeded {
		condition = batchv1.JobFailed
	}
	job.Status.Conditions = []batchv1.JobCondition{{Type: condition, Status: corev1.ConditionTrue}}
	if err := a.k8s.Status().Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-" + job.ResourceVersion, Namespace: "ns",
			Labels: map[string]string{batchv1.JobNameLabel: job.Name, resources.LabelManagedBy: "etcd-operator"}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: container,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: report}}}}},
	}
	if err := ctrl.SetControllerReference(job, pod, testScheme(t)); err != nil {
		t.Fatal(err)
	}
	if err := a.k8s.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

// The survivor's data is copied, and the copy on record, before the survivor is restarted
// with --force-new-cluster; it is forced once, and restarts without the flag once it serves.
func TestQuorumLostForGoodIsRecoveredFromACopiedSurvivor(t *testing.T) {
	a := lostMajority(t, etcdv1alpha1.QuorumLossRecoveryForceNewCluster)
	survivor := a.members[0]
	survivorPod, _ := a.pod(t, survivor)

	c := a.reconcile(t, 1)
	qr := c.Status.QuorumRecovery
	if qr == nil || qr.Member != survivor || !slices.Equal(qr.LostMembers, a.members[1:]) || qr.Trigger != "spec.quorumLossRecovery.policy ForceNewCluster" {
		t.Fatalf("status.quorumRecovery = %+v, want a recovery from %s recorded before anything changes", qr, survivor)
	}
	if pod, ok := a.pod(t, survivor); !ok || pod.UID != survivorPod.UID {
		t.Fatalf("the survivor was touched before the recovery was on record")
	}

	a.reconcile(t, 1)
	if _, ok := a.pod(t, survivor); ok {
		t.Fatalf("the survivor still runs: its files must not change while they are copied")
	}
	c = a.reconcile(t, 1)
	job := &batchv1.Job{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PreserveDataJobName(survivor)}, job); err != nil {
		t.Fatalf("no Job copies the survivor's data: %v", err)
	}
	job.CreationTimestamp = metav1.Now() // as the API server sets it; the fake client does not
	if err := a.k8s.Update(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	claim := &corev1.PersistentVolumeClaim{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.QuorumRecoveryClaimName(c.Name)}, claim); err != nil {
		t.Fatalf("no claim for the copy: %v", err)
	}
	c = a.reconcile(t, 2)
	if _, ok := a.pod(t, survivor); ok {
		t.Fatalf("the survivor was restarted while its data is copied")
	}
	if c.Status.QuorumRecovery.PreservedData != nil {
		t.Fatalf("a copy is on record before the Job finished")
	}

	a.finishPreserveJob(t, survivor, true, `{"preserved":{"member":"`+survivor+`","path":"`+survivor+`","sizeBytes":4096,"dbSHA256":"abc","raftIndex":10,"revision":7,"completionTime":"2026-11-23T00:00:00Z"}}`)
	c = a.reconcile(t, 1)
	if p := c.Status.QuorumRecovery.PreservedData; p == nil || p.Revision != 7 || p.DBSHA256 != "abc" || p.ClaimName != claim.Name {
		t.Fatalf("preservedData = %+v, want the Job's report", p)
	}
	if _, ok := a.pod(t, survivor); ok {
		t.Fatalf("the survivor restarted in the reconcile that recorded its copy: the record must come first")
	}

	a.reconcile(t, 1)
	forced, ok := a.pod(t, survivor)
	if !ok || !slices.Contains(forced.Spec.Containers[0].Args, "--force-new-cluster") {
		t.Fatalf("the survivor is not restarted with --force-new-cluster")
	}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(job), job); err == nil {
		t.Errorf("the copy's Job is left; its pod mounted the survivor's claim")
	}
	forced.Status = corev1.PodStatus{PodIP: "10.0.0.1", Phase: corev1.PodRunning}
	if err := a.k8s.Status().Update(t.Context(), forced); err != nil {
		t.Fatal(err)
	}
	c = a.reconcile(t, 2)
	if pod, _ := a.pod(t, survivor); pod.UID != forced.UID {
		t.Fatalf("the forced member was restarted before it served")
	}
	if c.Status.QuorumRecovery.ForcedTime == nil {
		t.Errorf("forcedTime not recorded")
	}

	// It serves alone: etcd lists it only.
	a.etcd.NoQuorum = false
	a.etcd.Members = a.etcd.Members[:1]
	c = a.reconcile(t, 1)
	if c.Status.QuorumRecovery.ServedTime == nil {
		t.Errorf("servedTime not recorded")
	}
	if _, ok := a.pod(t, survivor); ok {
		t.Fatalf("the forced member serves but is not restarted without the flag")
	}
	a.etcd.NoQuorum = true // a cluster of one without its member's pod answers nothing
	a.reconcile(t, 1)
	restarted, ok := a.pod(t, survivor)
	if !ok || slices.Contains(restarted.Spec.Containers[0].Args, "--force-new-cluster") {
		t.Fatalf("the member is not restarted normally on its data")
	}
	if events := a.events(); !strings.Contains(events, "BeginRecovery") || !strings.Contains(events, "PreserveData") || !strings.Contains(events, "ForceNewCluster") {
		t.Errorf("every step is an event; got:\n%s", events)
	}
}

// lostMajorityMute is a five-member cluster whose members 2 to 4 lost their pods and claims for
// good, and whose survivors answer nothing (a cluster with password authentication cannot
// authenticate anyone without a quorum).
func lostMajorityMute(t *testing.T, objects func() []client.Object) *scriptedCluster {
	t.Helper()
	a := newScriptedCluster(t, 5, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryForceNewCluster, After: &metav1.Duration{}}
	}, objects)
	a.reconcile(t, 1)
	a.loseForGood(t, a.members[2:])
	for _, name := range a.members[:2] {
		delete(a.etcd.Statuses, resources.ClientURL(a.cluster, name))
	}
	a.quorumLostFor(t, membership.MinRecoveryAfter)
	return a
}

// readLogJob is the read-log Job of member, which must exist.
func (a *scriptedCluster) readLogJob(t *testing.T, member string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.ReadLogJobName(member)}, job); err != nil {
		t.Fatalf("no Job reads member %s's log: %v", member, err)
	}
	return job
}

// readLogsMade reconciles until the survivors' read-log Jobs are made (the loss on record, then
// the Jobs), and stamps them with their creation time, as the API server would.
func (a *scriptedCluster) readLogsMade(t *testing.T) *etcdv1alpha1.EtcdCluster {
	t.Helper()
	for range 4 {
		c := a.reconcile(t, 1)
		made := 0
		for _, name := range a.members[:2] {
			job := &batchv1.Job{}
			if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.ReadLogJobName(name)}, job); err != nil {
				continue
			}
			made++
			if job.CreationTimestamp.IsZero() && job.Annotations[resources.AnnotationQuorumLostAt] != "2026-01-01T00:00:00Z" {
				job.CreationTimestamp = metav1.Now()
				if err := a.k8s.Update(t.Context(), job); err != nil {
					t.Fatal(err)
				}
			}
		}
		if made == 2 {
			return c
		}
	}
	t.Fatal("the survivors' read-log Jobs were not made")
	return nil
}

// Survivors that do not answer have their logs read from their data by read-log Jobs, which
// stop nothing; the recovery then builds on the one whose log reaches furthest. A Job left from
// an earlier quorum loss is not believed: it is made again.
func TestSurvivorsThatDoNotAnswerHaveTheirLogsReadFromTheirData(t *testing.T) {
	a := lostMajorityMute(t, nil)
	m0, m1 := a.members[0], a.members[1]
	// From an earlier loss: had it been believed, m0 would be the survivor.
	earlier, err := resources.ReadLogJob(a.cluster, m0, "", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "agent", resources.PodSettings{})
	if err != nil {
		t.Fatal(err)
	}
	earlier.UID = "the-earlier-loss" // its pod, left behind, is not the new Job's
	if err := a.k8s.Create(t.Context(), earlier); err != nil {
		t.Fatal(err)
	}
	a.finishAgentJob(t, earlier.Name, resources.ReadLogContainer, true, `{"log":{"member":"`+m0+`","commitIndex":500,"term":1,"walFiles":1}}`)
	pods := map[string]types.UID{}
	for _, name := range a.members[:2] {
		pod, _ := a.pod(t, name)
		pods[name] = pod.UID
	}

	a.readLogsMade(t)
	c := a.reconcile(t, 1)
	lostAt, lost := quorumLostSince(c)
	if !lost {
		t.Fatal("status does not say the cluster stopped being available")
	}
	for _, name := range a.members[:2] {
		job := a.readLogJob(t, name)
		if job.Annotations[resources.AnnotationQuorumLostAt] != lostAt.UTC().Format(time.RFC3339) {
			t.Fatalf("Job %s annotated %v: want one made for this quorum loss, at %s", job.Name, job.Annotations, lostAt)
		}
		if pod, ok := a.pod(t, name); !ok || pod.UID != pods[name] {
			t.Errorf("member %s's pod was touched: reading its log stops nothing", name)
		}
	}
	if c.Status.QuorumRecovery != nil {
		t.Fatalf("a recovery began before every survivor's log was read: %+v", c.Status.QuorumRecovery)
	}
	if d := conditionMessage(c, etcdv1alpha1.ConditionDegraded); !strings.Contains(d, "reading how far their logs reach from their data") {
		t.Errorf("Degraded says %q: it must say the logs are being read", d)
	}

	a.finishAgentJob(t, resources.ReadLogJobName(m0), resources.ReadLogContainer, true, `{"log":{"member":"`+m0+`","commitIndex":90,"term":2,"walFiles":1}}`)
	a.finishAgentJob(t, resources.ReadLogJobName(m1), resources.ReadLogContainer, true, `{"log":{"member":"`+m1+`","commitIndex":120,"term":2,"walFiles":1}}`)
	c = a.reconcile(t, 1)
	if qr := c.Status.QuorumRecovery; qr == nil || qr.Member != m1 {
		t.Fatalf("status.quorumRecovery = %+v, want a recovery from %s, whose log reaches furthest", qr, m1)
	}
	if events := a.events(); !strings.Contains(events, "ReadLogs") {
		t.Errorf("no ReadLogs event:\n%s", events)
	}
}

// A log that cannot be read is not guessed at: nothing is rewritten, and status says why and
// names the annotation that picks the member by hand.
func TestAnUnreadableLogStopsTheRecoveryAndSaysWhy(t *testing.T) {
	a := lostMajorityMute(t, nil)
	m0, m1 := a.members[0], a.members[1]
	a.readLogsMade(t)
	a.finishAgentJob(t, resources.ReadLogJobName(m0), resources.ReadLogContainer, true, `{"log":{"member":"`+m0+`","commitIndex":90,"term":2,"walFiles":1}}`)
	a.finishAgentJob(t, resources.ReadLogJobName(m1), resources.ReadLogContainer, false, `{"error":"/var/lib/etcd/member/wal holds no WAL file","permanent":true}`)
	c := a.reconcile(t, 3)
	if c.Status.QuorumRecovery != nil {
		t.Fatalf("a recovery began though member %s's log could not be read: %+v", m1, c.Status.QuorumRecovery)
	}
	d := conditionMessage(c, etcdv1alpha1.ConditionDegraded)
	for _, want := range []string{"member " + m1 + ": /var/lib/etcd/member/wal holds no WAL file", "delete it to read again", etcdv1alpha1.AnnotationRecoverFrom} {
		if !strings.Contains(d, want) {
			t.Errorf("Degraded says %q: it must say %q", d, want)
		}
	}
}

// A copy that fails stops the recovery before anything is rewritten, and says how to retry.
func TestFailedCopyStopsTheRecovery(t *testing.T) {
	a := lostMajority(t, etcdv1alpha1.QuorumLossRecoveryForceNewCluster)
	survivor := a.members[0]
	a.reconcile(t, 3)
	a.finishPreserveJob(t, survivor, false, `{"error":"no space left on device"}`)
	for range 3 {
		_, _ = a.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.cluster)})
	}
	c := &etcdv1alpha1.EtcdCluster{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), c); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.pod(t, survivor); ok {
		t.Fatalf("the survivor was restarted after its copy failed")
	}
	if c.Status.QuorumRecovery.PreservedData != nil {
		t.Fatalf("a failed copy is on record as kept")
	}
	progressing := conditionMessage(c, etcdv1alpha1.ConditionProgressing)
	if !strings.Contains(progressing, "no space left on device") || !strings.Contains(progressing, "delete the Job to try again") {
		t.Errorf("Progressing says %q: it must say why the copy failed and how to retry", progressing)
	}
}

// Policy Manual changes nothing, and names the survivor and the annotation; the annotation
// starts the recovery and is consumed by it.
func TestManualRecoveryWaitsForTheAnnotation(t *testing.T) {
	a := lostMajority(t, etcdv1alpha1.QuorumLossRecoveryManual)
	survivor := a.members[0]
	survivorPod, _ := a.pod(t, survivor)
	c := a.reconcile(t, 3)
	if c.Status.QuorumRecovery != nil {
		t.Fatalf("policy Manual began a recovery: %+v", c.Status.QuorumRecovery)
	}
	if pod, ok := a.pod(t, survivor); !ok || pod.UID != survivorPod.UID {
		t.Fatalf("policy Manual touched the survivor")
	}
	command := etcdv1alpha1.AnnotationRecoverFrom + "=" + survivor
	if d := conditionMessage(c, etcdv1alpha1.ConditionDegraded); !strings.Contains(d, command) {
		t.Errorf("Degraded says %q: it must name the command %s", d, command)
	}
	if events := a.events(); !strings.Contains(events, command) {
		t.Errorf("no event names the command %s:\n%s", command, events)
	}

	patch := client.MergeFrom(c.DeepCopy())
	c.Annotations = map[string]string{etcdv1alpha1.AnnotationRecoverFrom: survivor}
	if err := a.k8s.Patch(t.Context(), c, patch); err != nil {
		t.Fatal(err)
	}
	c = a.reconcile(t, 1)
	if qr := c.Status.QuorumRecovery; qr == nil || qr.Member != survivor || qr.Trigger != "annotation "+command {
		t.Fatalf("status.quorumRecovery = %+v, want a recovery from %s on the annotation", qr, survivor)
	}
	c = a.reconcile(t, 1)
	if _, ok := c.Annotations[etcdv1alpha1.AnnotationRecoverFrom]; ok {
		t.Errorf("the annotation is left once the recovery is under way: a later loss would be recovered on an old leave")
	}
}

func conditionMessage(c *etcdv1alpha1.EtcdCluster, condType string) string {
	for _, cond := range c.Status.Conditions {
		if cond.Type == condType {
			return cond.Message
		}
	}
	return ""
}

// completedBackup is an EtcdBackup of cluster c whose last snapshot completed at the given
// minute.
func completedBackup(name, cluster string, minute int, revision int64) *etcdv1alpha1.EtcdBackup {
	at := metav1.NewTime(time.Date(2026, 11, 24, 12, minute, 0, 0, time.UTC))
	return &etcdv1alpha1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: cluster, Destination: etcdv1alpha1.StorageLocation{
			PVC: &etcdv1alpha1.PVCLocation{ClaimName: "backups"}}},
		Status: etcdv1alpha1.EtcdBackupStatus{LastBackup: &etcdv1alpha1.BackupArtifact{
			URI: "pvc://backups/" + name + ".db", SHA256: strings.Repeat("a", 64), Revision: revision, EtcdVersion: "3.6.16",
			StartTime: at, CompletionTime: at}},
	}
}

// With every member's data gone and policy FromLatestBackup, the recovery is put on record with
// the newest snapshot of the cluster's backups, then an in-place EtcdRestore of it is made,
// owned by the cluster, once; the restore carries the recovery from there.
func TestQuorumLostWithEveryMemberIsRestoredFromTheLatestBackup(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryFromLatestBackup, After: &metav1.Duration{}}
	}, func() []client.Object {
		return []client.Object{
			completedBackup("hourly", "c", 30, 700),
			completedBackup("nightly", "c", 0, 500),
			completedBackup("other-cluster", "d", 59, 900),
			// Of a cluster c deleted since: the same name, another cluster.
			func() *etcdv1alpha1.EtcdBackup {
				b := completedBackup("of-an-earlier-c", "c", 58, 800)
				b.Status.LastBackup.ClusterUID = "uid-of-an-earlier-c"
				return b
			}(),
			&etcdv1alpha1.EtcdBackup{ObjectMeta: metav1.ObjectMeta{Name: "never-ran", Namespace: "ns"}, Spec: etcdv1alpha1.EtcdBackupSpec{ClusterName: "c"}},
		}
	})
	a.reconcile(t, 1)
	a.loseForGood(t, a.members)
	a.quorumLostFor(t, membership.MinRecoveryAfter)

	c := a.reconcile(t, 1)
	qr := c.Status.QuorumRecovery
	if qr == nil || qr.Backup == nil || qr.Member != "" || !slices.Equal(qr.LostMembers, a.members) ||
		qr.Trigger != "spec.quorumLossRecovery.policy FromLatestBackup" {
		t.Fatalf("status.quorumRecovery = %+v, want a recovery from a backup, every member lost", qr)
	}
	if b := qr.Backup; b.EtcdBackup != "hourly" || b.SnapshotURI != "pvc://backups/hourly.db" || b.Revision != 700 || b.EtcdRestore == "" {
		t.Fatalf("status.quorumRecovery.backup = %+v, want hourly's snapshot at revision 700, the newest of the cluster's", *b)
	}
	restores := &etcdv1alpha1.EtcdRestoreList{}
	if err := a.k8s.List(t.Context(), restores); err != nil || len(restores.Items) != 0 {
		t.Fatalf("restores %v (%v): none may be made before the recovery is on record", restores.Items, err)
	}

	c = a.reconcile(t, 3)
	if err := a.k8s.List(t.Context(), restores); err != nil || len(restores.Items) != 1 {
		t.Fatalf("restores %v (%v): want exactly one", restores.Items, err)
	}
	rs := restores.Items[0]
	src := rs.Spec.Source.Backup
	if rs.Name != qr.Backup.EtcdRestore || src == nil || src.Name != "hourly" || src.URI != "pvc://backups/hourly.db" ||
		rs.Spec.Target.Mode != etcdv1alpha1.RestoreInPlace || rs.Spec.Target.ClusterName != "c" || !metav1.IsControlledBy(&rs, c) {
		t.Fatalf("EtcdRestore %s: %+v, owners %v; want an in-place restore of c from hourly's recorded snapshot, owned by c", rs.Name, rs.Spec, rs.OwnerReferences)
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionProgressing); cond == nil || cond.Reason != etcdv1alpha1.ReasonRecoveringQuorum ||
		!strings.Contains(cond.Message, "EtcdRestore "+rs.Name) {
		t.Errorf("Progressing %+v: want RecoveringQuorum naming the restore", cond)
	}
}

// A recovery from the newest backup whose snapshot no longer exists restores the newest older
// snapshot of that EtcdBackup that does (the restore falls back): the cluster's record then
// names the snapshot restored and its revision, and a Warning event on the cluster says it
// fell back, once; the recovery's last event names the snapshot it recovered from. Before, the
// record named a snapshot that did not exist, and the cluster said nothing of the fallback.
func TestRecoveryFromABackupSaysWhenItsRestoreFellBack(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryFromLatestBackup, After: &metav1.Duration{}}
	}, func() []client.Object { return []client.Object{completedBackup("hourly", "c", 30, 700)} })
	a.reconcile(t, 1)
	a.loseForGood(t, a.members)
	a.quorumLostFor(t, membership.MinRecoveryAfter)
	a.reconcile(t, 3)
	restores := &etcdv1alpha1.EtcdRestoreList{}
	if err := a.k8s.List(t.Context(), restores); err != nil || len(restores.Items) != 1 {
		t.Fatalf("restores %v (%v): want exactly one", restores.Items, err)
	}
	a.events()

	// The restore Job found hourly's newest snapshot gone and restored the one before it.
	rs := &restores.Items[0]
	rs.Status.SnapshotURI, rs.Status.MissingSnapshotURI, rs.Status.RestoredRevision = "pvc://backups/hourly-older.db", "pvc://backups/hourly.db", ptr.To[int64](650)
	if err := a.k8s.Status().Update(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	c := a.reconcile(t, 2)
	if b := c.Status.QuorumRecovery.Backup; b.SnapshotURI != "pvc://backups/hourly-older.db" || b.Revision != 650 || b.EtcdBackup != "hourly" {
		t.Fatalf("status.quorumRecovery.backup = %+v, want the snapshot restored, hourly-older.db at revision 650", *b)
	}
	if said := a.events(); strings.Count(said, "Warning SnapshotFallback") != 1 || !strings.Contains(said, "pvc://backups/hourly.db") || !strings.Contains(said, "pvc://backups/hourly-older.db") {
		t.Fatalf("events %q: want one Warning SnapshotFallback naming the missing snapshot and the one restored", said)
	}

	// Once the cluster serves at its size, the recovery's end names the snapshot it came from.
	before := c.DeepCopy()
	c.Status.QuorumRecovery.CompletionTime = &metav1.Time{Time: time.Now()}
	a.r.announceQuorumRecovered(t.Context(), c, before)
	if said := a.events(); !strings.Contains(said, "Normal QuorumRecovered") || !strings.Contains(said, "EtcdBackup hourly's snapshot pvc://backups/hourly-older.db (revision 650)") {
		t.Fatalf("events %q: want QuorumRecovered naming the snapshot restored", said)
	}
}

// Under the other policies nothing is restored by itself: status says how.
func TestQuorumLostWithEveryMemberWaitsForTheUserUnderForceNewCluster(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryForceNewCluster, After: &metav1.Duration{}}
	}, func() []client.Object { return []client.Object{completedBackup("hourly", "c", 30, 700)} })
	a.reconcile(t, 1)
	a.loseForGood(t, a.members)
	c := a.reconcile(t, 3)
	restores := &etcdv1alpha1.EtcdRestoreList{}
	if err := a.k8s.List(t.Context(), restores); err != nil || len(restores.Items) != 0 || c.Status.QuorumRecovery != nil {
		t.Fatalf("restores %v, status.quorumRecovery %+v (%v): nothing may be restored under ForceNewCluster", restores.Items, c.Status.QuorumRecovery, err)
	}
	if d := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionDegraded); d == nil || d.Reason != etcdv1alpha1.ReasonQuorumLost ||
		!strings.Contains(d.Message, "FromLatestBackup") {
		t.Errorf("Degraded %+v: want QuorumLost saying how to restore", d)
	}
}

// A member a recovery did without because its pod found no node keeps its claim once the
// recovered cluster serves: its data is out of reach, not gone, and may hold writes the
// survivor lacked. Its pod goes, as an orphan's; its claim is released (unlabelled as a member,
// labelled as kept from the cluster), never deleted.
func TestAMemberARecoveryDidWithoutKeepsItsClaim(t *testing.T) {
	a := newScriptedCluster(t, 3, nil, nil)
	stranded := a.members[2]
	a.etcd.Members = a.etcd.Members[:2] // the recovered cluster: the survivor and one re-added
	c := &etcdv1alpha1.EtcdCluster{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), c); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	c.Status.QuorumRecovery = &etcdv1alpha1.QuorumRecoveryStatus{Member: a.members[0], LostMembers: []string{stranded},
		Trigger: "spec.quorumLossRecovery.policy ForceNewCluster", StartTime: now, ServedTime: &now}
	if err := a.k8s.Status().Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}

	a.reconcile(t, 1)

	if _, ok := a.pod(t, stranded); ok {
		t.Errorf("the stranded member's pod is left")
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: c.Namespace, Name: resources.PVCName(stranded)}, pvc); err != nil {
		t.Fatalf("the claim of %s, which the recovery did without, was deleted: %v", stranded, err)
	}
	if pvc.Labels[resources.LabelCluster] != "" || pvc.Labels["etcd.database.dev/retained-from"] != c.Name {
		t.Errorf("claim labels %v: want it released from the cluster and labelled retained-from=%s", pvc.Labels, c.Name)
	}
}

// A quorum-loss recovery from a backup completes only once its EtcdRestore has: the cluster
// serving at its size is not enough, as the restore still compares its members' data (before,
// the recovery said completed while the restore went on, seen in the e2e test).
func TestARecoveryFromABackupCompletesWithItsRestore(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{Spec: etcdv1alpha1.EtcdClusterSpec{Size: 3}}
	c.Status.ReadyMembers = 3
	served := metav1.Now()
	c.Status.QuorumRecovery = &etcdv1alpha1.QuorumRecoveryStatus{StartTime: served, ServedTime: &served,
		Backup: &etcdv1alpha1.RecoveryBackupStatus{EtcdBackup: "hourly", EtcdRestore: "c-qr-1"}}
	rs := &etcdv1alpha1.EtcdRestore{Status: etcdv1alpha1.EtcdRestoreStatus{Phase: etcdv1alpha1.RestoreRestoring}}
	obs := &observation{reachable: true, pods: map[string]*corev1.Pod{},
		members: []etcd.Member{{ID: 1, Name: "a"}, {ID: 2, Name: "b"}, {ID: 3, Name: "c"}}}
	obs.recovery.restore = rs

	recordQuorumRecovery(c, obs, membership.Step{Action: membership.Wait}, time.Now())
	if c.Status.QuorumRecovery.CompletionTime != nil {
		t.Fatal("the recovery completed while its EtcdRestore was still restoring")
	}
	rs.Status.Phase = etcdv1alpha1.RestoreCompleted
	recordQuorumRecovery(c, obs, membership.Step{Action: membership.Wait}, time.Now())
	if c.Status.QuorumRecovery.CompletionTime == nil {
		t.Fatal("the recovery did not complete with its EtcdRestore")
	}
}
