package controllers

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Each test here stands in front of one destructive step's guard: delete the guard and the
// test fails (the commit that added it says how).

// setPodReady sets the Ready condition of member's pod, as the kubelet would.
func (a *scriptedCluster) setPodReady(t *testing.T, member string, ready bool) {
	t.Helper()
	pod, ok := a.pod(t, member)
	if !ok {
		t.Fatalf("member %s has no pod", member)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if err := a.k8s.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

// progressing is the Progressing condition's message.
func progressing(c *etcdv1alpha1.EtcdCluster) string {
	return conditionMessage(c, etcdv1alpha1.ConditionProgressing)
}

// A scale-down that would leave fewer healthy voters than a quorum of those left waits. Five
// voters of which three are not ready, asked to be four: removing the newest (not ready) one
// leaves two healthy of four, short of three. Once one of them is ready again the removal
// keeps a quorum and goes ahead. (The decision table's "quorum at the edge" case asks for as
// many members as there are, so it never reaches the scale-down.)
func TestScaleDownThatWouldLoseQuorumWaits(t *testing.T) {
	a := newScriptedCluster(t, 5, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = 4 }, nil)
	for _, name := range a.members[2:] {
		a.setPodReady(t, name, false)
	}

	c := a.reconcile(t, 3)
	if slices.Contains(a.etcd.Calls, "RemoveMember") || len(a.etcd.Members) != 5 {
		t.Fatalf("etcd calls %v, %d members: a removal leaving 2 healthy of 4 voters was made", a.etcd.Calls, len(a.etcd.Members))
	}
	if p := progressing(c); !strings.Contains(p, "removing a member now would lose quorum") {
		t.Fatalf("Progressing says %q: the scale-down was not reached, or did not say why it waits", p)
	}

	a.setPodReady(t, a.members[2], true)
	a.reconcile(t, 1)
	if !slices.Contains(a.etcd.Calls, "RemoveMember") || len(a.etcd.Members) != 4 {
		t.Fatalf("etcd calls %v, %d members: with 3 healthy of the 4 left, the member is removed", a.etcd.Calls, len(a.etcd.Members))
	}
}

// lagBehind puts the leader's log at a busy cluster's index and has member applied it only to
// entries behind; every other member is caught up.
func (a *scriptedCluster) lagBehind(member string, entries uint64) {
	const leaderIndex = 50_000
	for url, st := range a.etcd.Statuses {
		st.RaftIndex, st.RaftAppliedIndex = leaderIndex, leaderIndex
		if url == resources.ClientURL(a.cluster, member) {
			st.RaftAppliedIndex = leaderIndex - entries
		}
		a.etcd.Statuses[url] = st
	}
}

// podVersions are the member pods' resourceVersions by name: a pod deleted, made again or
// changed shows (the fake client gives pods no UID).
func (a *scriptedCluster) podVersions(t *testing.T) map[string]string {
	t.Helper()
	pods, _ := memberObjects(t, a.k8s)
	return pods
}

// A member more than membership.MaxLagEntries behind the leader's log is not healthy: it
// answers, its pod is Ready, but it is still replaying. Nothing that takes another member
// down waits less for it than for a member that does not answer: no upgrade step, no restart
// on a changed spec, and no removal counting it towards the quorum that remains. Within
// MaxLagEntries it is caught up, and each goes ahead.
func TestALaggingMemberHoldsEveryStepThatTakesAMemberDown(t *testing.T) {
	lagging := membership.MaxLagEntries + 1
	t.Run("upgrade", func(t *testing.T) {
		a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Version = "3.7.3" }, nil)
		a.lagBehind(a.members[1], uint64(lagging))
		before := a.podVersions(t)
		c := a.reconcile(t, 3)
		for _, p := range memberPods(t, a) {
			if v := p.Annotations[resources.AnnotationEtcdVersion]; v != "3.6.16" {
				t.Fatalf("member %s runs %s: upgraded while member %s is %d entries behind the leader", p.Name, v, a.members[1], lagging)
			}
		}
		if !maps.Equal(before, a.podVersions(t)) {
			t.Fatalf("member pods changed while a member lags: %v -> %v", before, a.podVersions(t))
		}
		assertLagReported(t, c, a.members[1])

		a.lagBehind(a.members[1], membership.MaxLagEntries)
		a.reconcile(t, 2) // the member's pod evicted, then made again on the new version
		upgraded := 0
		for _, p := range memberPods(t, a) {
			if p.Annotations[resources.AnnotationEtcdVersion] == "3.7.3" {
				upgraded++
			}
		}
		if upgraded != 1 {
			t.Fatalf("%d members upgraded once the member caught up, want 1; events:\n%s", upgraded, a.events())
		}
	})
	t.Run("restart on a changed spec", func(t *testing.T) {
		a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Tuning.SnapshotCount = 5000 }, nil)
		// The members were made from the spec before the change.
		for _, p := range memberPods(t, a) {
			p.Annotations[resources.AnnotationPodSpecHash] = "earlier-spec"
			if err := a.k8s.Update(t.Context(), &p); err != nil {
				t.Fatal(err)
			}
		}
		a.lagBehind(a.members[1], uint64(lagging))
		before := a.podVersions(t)
		c := a.reconcile(t, 3)
		if after := a.podVersions(t); !maps.Equal(before, after) {
			t.Fatalf("a member was restarted on the changed spec while member %s lags: pods %v -> %v", a.members[1], before, after)
		}
		assertLagReported(t, c, a.members[1])

		a.lagBehind(a.members[1], membership.MaxLagEntries)
		a.reconcile(t, 1)
		if after := a.podVersions(t); maps.Equal(before, after) {
			t.Fatalf("no member was restarted on the changed spec once the member caught up; events:\n%s", a.events())
		}
	})
	t.Run("removal", func(t *testing.T) {
		// Five voters, two not ready and one lagging, asked to be four: removing the newest
		// (not ready) leaves two healthy of four. Counted healthy, the lagging member would
		// make it three, and the removal would go ahead.
		a := newScriptedCluster(t, 5, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = 4 }, nil)
		for _, name := range a.members[3:] {
			a.setPodReady(t, name, false)
		}
		a.lagBehind(a.members[2], uint64(lagging))
		c := a.reconcile(t, 3)
		if slices.Contains(a.etcd.Calls, "RemoveMember") || len(a.etcd.Members) != 5 {
			t.Fatalf("etcd calls %v, %d members: a member was removed counting lagging member %s towards the quorum left", a.etcd.Calls, len(a.etcd.Members), a.members[2])
		}
		assertLagReported(t, c, a.members[2])

		a.lagBehind(a.members[2], membership.MaxLagEntries)
		a.reconcile(t, 1)
		if len(a.etcd.Members) != 4 {
			t.Fatalf("%d members once the member caught up, want one removed; calls %v", len(a.etcd.Members), a.etcd.Calls)
		}
	})
}

// assertLagReported checks that status says why member is not healthy.
func assertLagReported(t *testing.T, c *etcdv1alpha1.EtcdCluster, member string) {
	t.Helper()
	for _, m := range c.Status.Members {
		if m.Name == member {
			if m.Healthy || !slices.Contains(m.Errors, "catching up with the leader's log") {
				t.Fatalf("status.members[%s] = healthy %t, errors %v: want it unhealthy, catching up", member, m.Healthy, m.Errors)
			}
			return
		}
	}
	t.Fatalf("member %s is not in status.members", member)
}

// underwayQuorumRecovery puts on record a recovery from member that has served alone since.
func (a *scriptedCluster) underwayQuorumRecovery(t *testing.T, member string, lost []string) {
	t.Helper()
	c := &etcdv1alpha1.EtcdCluster{}
	if err := a.k8s.Get(t.Context(), client.ObjectKeyFromObject(a.cluster), c); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	c.Status.QuorumRecovery = &etcdv1alpha1.QuorumRecoveryStatus{Member: member, LostMembers: lost,
		Trigger: "spec.quorumLossRecovery.policy ForceNewCluster", StartTime: now, ForcedTime: &now, ServedTime: &now}
	if err := a.k8s.Status().Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

// A quorum recovery is complete only once the cluster is back at its size, every voter ready,
// and the member it forced runs without --force-new-cluster: a recovery completed earlier is
// no longer under way, and a second loss meanwhile would be met by a new recovery forcing a
// member again rather than by this one carried through.
func TestQuorumRecoveryCompletesOnlyAtItsSizeAndUnforced(t *testing.T) {
	for _, tc := range []struct {
		name string
		// size is spec.size; members are made and listed, the last learners of them voters.
		size, members, learners int
		prepare                 func(t *testing.T, a *scriptedCluster)
		// settle makes the cluster whole, after which the recovery completes.
		settle func(t *testing.T, a *scriptedCluster)
	}{
		{
			name: "the forced member's pod still runs", size: 1, members: 1,
			// spec.size lowered to 1 while the member served alone: the cluster is at its
			// size, but the member runs forced until it is restarted without the flag.
			prepare: func(t *testing.T, a *scriptedCluster) {
				pod, _ := a.pod(t, a.members[0])
				pod.Annotations[resources.AnnotationForceNewCluster] = "true"
				if err := a.k8s.Update(t.Context(), pod); err != nil {
					t.Fatal(err)
				}
			},
			settle: func(t *testing.T, a *scriptedCluster) {
				a.reconcile(t, 1) // the pod, rolled, is made again without the flag
				pod, ok := a.pod(t, a.members[0])
				if !ok || pod.Annotations[resources.AnnotationForceNewCluster] != "" {
					t.Fatalf("the forced member was not made again without the flag")
				}
				pod.Status = corev1.PodStatus{PodIP: "10.0.0.1", Phase: corev1.PodRunning,
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
				if err := a.k8s.Status().Update(t.Context(), pod); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "a member re-added is still a learner", size: 3, members: 3, learners: 1,
			settle: func(*testing.T, *scriptedCluster) {}, // the next reconcile promotes it
		},
		{
			name: "a voter is not ready", size: 3, members: 3,
			prepare: func(t *testing.T, a *scriptedCluster) { a.setPodReady(t, a.members[2], false) },
			settle:  func(t *testing.T, a *scriptedCluster) { a.setPodReady(t, a.members[2], true) },
		},
		{
			name: "a voter more than the spec asks for, not ready", size: 3, members: 4,
			prepare: func(t *testing.T, a *scriptedCluster) { a.setPodReady(t, a.members[3], false) },
			settle:  func(*testing.T, *scriptedCluster) {}, // the next reconcile removes it
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newScriptedCluster(t, tc.members, nil, nil)
			if tc.size != tc.members {
				c := a.reconcile(t, 0)
				c.Spec.Size = int32(tc.size)
				if err := a.k8s.Update(t.Context(), c); err != nil {
					t.Fatal(err)
				}
			}
			for i := tc.members - tc.learners; i < tc.members; i++ {
				a.etcd.Members[i].IsLearner = true
			}
			a.underwayQuorumRecovery(t, a.members[0], []string{"c-lost1", "c-lost2"})
			if tc.prepare != nil {
				tc.prepare(t, a)
			}

			c := a.reconcile(t, 1)
			if qr := c.Status.QuorumRecovery; qr == nil || qr.CompletionTime != nil {
				t.Fatalf("status.quorumRecovery = %+v: completed with %d of %d members ready and listed, before the cluster is whole", qr, c.Status.ReadyMembers, len(c.Status.Members))
			}

			tc.settle(t, a)
			for range 3 {
				if c = a.reconcile(t, 1); c.Status.QuorumRecovery.CompletionTime != nil {
					return
				}
			}
			t.Fatalf("status.quorumRecovery = %+v, %d of %d members ready: not completed once the cluster is whole; events:\n%s",
				c.Status.QuorumRecovery, c.Status.ReadyMembers, len(c.Status.Members), a.events())
		})
	}
}

// A formed cluster whose status lists no members (status lost, or written by an operator that
// recorded none) and that has no quorum has its members' data on their claims: with policy
// FromLatestBackup, no member counts as lost, and nothing is restored over that data.
func TestNoMembersOnRecordIsNoLossOfEveryMember(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.QuorumLossRecovery = etcdv1alpha1.QuorumLossRecoverySpec{Policy: etcdv1alpha1.QuorumLossRecoveryFromLatestBackup, After: &metav1.Duration{}}
	}, func() []client.Object { return []client.Object{completedBackup("hourly", "c", 30, 700)} })
	a.etcd.NoQuorum = true
	before := a.podVersions(t)

	c := a.reconcile(t, 4)
	if len(c.Status.Members) != 0 || c.Status.ClusterID == "" {
		t.Fatalf("status: clusterID %q, members %+v; the test wants a formed cluster with none on record", c.Status.ClusterID, c.Status.Members)
	}
	restores := &etcdv1alpha1.EtcdRestoreList{}
	if err := a.k8s.List(t.Context(), restores); err != nil || len(restores.Items) != 0 || c.Status.QuorumRecovery != nil {
		t.Fatalf("%d restores, status.quorumRecovery %+v (%v): a backup was restored over members whose data is on their claims", len(restores.Items), c.Status.QuorumRecovery, err)
	}
	if after := a.podVersions(t); !maps.Equal(before, after) {
		t.Fatalf("member pods changed: %v -> %v", before, after)
	}
}

// With spec.storage.retentionPolicy.whenScaled Retain, the claim of a member removed by a
// scale-down is kept, released from the cluster: unlabelled as a member (or it would bring the
// member back) and labelled as retained from it.
func TestScaleDownUnderWhenScaledRetainKeepsTheClaim(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		c.Spec.Size = 2
		c.Spec.Storage.RetentionPolicy.WhenScaled = etcdv1alpha1.RetainPVC
	}, nil)
	removed := a.members[2] // the newest follower
	a.reconcile(t, 3)
	if len(a.etcd.Members) != 2 || slices.ContainsFunc(a.etcd.Members, func(m etcd.Member) bool { return m.Name == removed }) {
		t.Fatalf("etcd members %+v: want %s removed", a.etcd.Members, removed)
	}
	if _, ok := a.pod(t, removed); ok {
		t.Errorf("the removed member's pod is left")
	}
	pvc := &corev1.PersistentVolumeClaim{}
	if err := a.k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: resources.PVCName(removed)}, pvc); err != nil {
		t.Fatalf("the claim of %s was deleted under whenScaled Retain: %v", removed, err)
	}
	if _, member := pvc.Labels[resources.LabelCluster]; member || pvc.Labels["etcd.database.dev/retained-from"] != "c" {
		t.Fatalf("claim labels %v: want it released from the cluster and labelled retained-from=c", pvc.Labels)
	}
}

// A cluster whose first members never formed is reset: their pods deleted and, to be made again,
// their claims, but only those never bound. A bound claim may hold a member's data (a volume
// bound late, a member that started and wrote before its peers failed), and is kept.
func TestResettingBootstrapMembersKeepsABoundClaim(t *testing.T) {
	cluster := staleTestCluster()
	pending := resources.MemberPVC(cluster, resources.MemberSpec{Name: "c-pending"})
	pending.Status.Phase = corev1.ClaimPending
	bound := resources.MemberPVC(cluster, resources.MemberSpec{Name: "c-bound"})
	bound.Status.Phase = corev1.ClaimBound
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(cluster, pending, bound).Build()
	obs := &observation{pods: map[string]*corev1.Pod{}, pvcs: map[string]*corev1.PersistentVolumeClaim{}}
	for name, pvc := range map[string]*corev1.PersistentVolumeClaim{"c-pending": pending, "c-bound": bound} {
		observed := &corev1.PersistentVolumeClaim{}
		if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(pvc), observed); err != nil {
			t.Fatal(err)
		}
		obs.pvcs[name] = observed
	}
	r := &EtcdClusterReconciler{Client: k8s}
	if _, err := r.act(t.Context(), cluster, obs, membership.Step{Action: membership.ResetBootstrapMembers, Members: []string{"c-pending", "c-bound"}}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(bound), &corev1.PersistentVolumeClaim{}); err != nil {
		t.Fatalf("the bound claim: %v; want it kept", err)
	}
	if err := k8s.Get(t.Context(), client.ObjectKeyFromObject(pending), &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the pending claim: %v; want it deleted", err)
	}
}
