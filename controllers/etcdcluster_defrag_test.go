package controllers

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A defragmentation, which can take minutes on a large database, does not hold a reconcile
// worker: the reconcile that starts it returns at once, the next ones wait for it (doing nothing
// else to the cluster, reporting the operation), and its end is announced by an event.
// Before, the reconcile called Defragment and waited for it, up to five minutes.
func TestDefragmentationDoesNotHoldAReconcile(t *testing.T) {
	s := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) {
		min := resource.MustParse("1Mi")
		c.Spec.Defragmentation = etcdv1alpha1.DefragmentationSpec{ThresholdPercent: 50, MinimumDBSize: &min}
	}, nil)
	follower := resources.ClientURL(s.cluster, s.members[2])
	st := s.etcd.Statuses[follower]
	st.DBSizeBytes, st.DBSizeInUseBytes = 400<<20, 100<<20
	s.etcd.Statuses[follower] = st
	release := make(chan struct{})
	s.etcd.Hold = map[string]chan struct{}{"Defragment": release}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	returned := make(chan struct{})
	go func() {
		defer close(returned)
		s.reconcile(t, 1)
	}()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the reconcile that started the defragmentation waits for it to end")
	}
	got := s.reconcile(t, 1)
	progressing := meta.FindStatusCondition(got.Status.Conditions, etcdv1alpha1.ConditionProgressing)
	if progressing == nil || progressing.Reason != etcdv1alpha1.ReasonDefragmenting || degradedReason(got) != "" {
		t.Fatalf("while defragmenting: progressing %+v, degraded %q", progressing, degradedReason(got))
	}
	if ev := s.events(); strings.Contains(ev, "defragmented") {
		t.Fatalf("the end was announced before it happened: %q", ev)
	}

	close(release)
	for deadline := time.Now().Add(10 * time.Second); s.r.defrags.member("ns/c") != ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the defragmentation did not end once etcd finished it")
		}
	}
	if ev := s.events(); !strings.Contains(ev, "defragmented "+s.members[2]) {
		t.Fatalf("events %q, want the end of the defragmentation of %s", ev, s.members[2])
	}
	if calls := strings.Join(s.etcd.Calls, ","); calls != "Defragment" {
		t.Fatalf("etcd calls %s, want one defragmentation", calls)
	}
}

// A member is defragmented only for free space worth it: a small database keeps a few free
// pages after any defragmentation, and was defragmented again at every look (every few
// seconds, seen on a 40 KiB database with thresholdPercent 10 and minimumDBSize 1Ki).
func TestDefragmentationAsksForFreeSpaceWorthIt(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{Spec: etcdv1alpha1.EtcdClusterSpec{Defragmentation: etcdv1alpha1.DefragmentationSpec{
		Policy: etcdv1alpha1.DefragmentationAuto, ThresholdPercent: 10, MinimumDBSize: ptr.To(resource.MustParse("1Ki"))}}}
	if got := defragPolicy(c); got.MinFreeBytes != membership.DefragMinFreeBytes || got.MinBytes != 1024 || got.ThresholdPercent != 10 || !got.Enabled {
		t.Fatalf("defragmentation policy %+v, want the spec's with at least %d bytes free", got, membership.DefragMinFreeBytes)
	}
}
