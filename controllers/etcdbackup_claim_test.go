package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

// A backup to a claim the operator provisions needs nothing made beforehand: the claim is made
// as soon as the backup is, while its cluster comes up, with the size and class asked for, and
// belongs to no object, so that its snapshots outlive the EtcdBackup.

func provisioned(claim, size, class string) func(*etcdv1alpha1.EtcdBackup) {
	return func(b *etcdv1alpha1.EtcdBackup) {
		b.Spec.Destination.PVC = &etcdv1alpha1.PVCLocation{ClaimName: claim,
			Provision: &etcdv1alpha1.ClaimProvision{Size: resource.MustParse(size), StorageClassName: &class}}
	}
}

func TestBackupProvisionsItsMissingClaim(t *testing.T) {
	b := newBackup(t, restrictedNamespace(t), "nowhere", provisioned("snapshots", "256Mi", "slow"))
	pvc := &corev1.PersistentVolumeClaim{}
	eventually(t, 10*time.Second, func() error {
		return k8sClient.Get(t.Context(), client.ObjectKey{Namespace: b.Namespace, Name: "snapshots"}, pvc)
	})
	if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("256Mi")) != 0 {
		t.Errorf("claim requests %s, want 256Mi", got.String())
	}
	if class := pvc.Spec.StorageClassName; class == nil || *class != "slow" {
		t.Errorf("claim's StorageClass %v, want slow", class)
	}
	if modes := pvc.Spec.AccessModes; len(modes) != 1 || modes[0] != corev1.ReadWriteOnce {
		t.Errorf("claim's access modes %v, want ReadWriteOnce", modes)
	}
	if pvc.Labels["app.kubernetes.io/managed-by"] != "etcd-operator" {
		t.Errorf("claim's labels %v do not say the operator made it", pvc.Labels)
	}
	if len(pvc.OwnerReferences) != 0 {
		t.Errorf("claim is owned by %+v: deleting the EtcdBackup would delete its snapshots", pvc.OwnerReferences)
	}
	// The claim being there, what the backup waits for is its cluster.
	waitBackupCondition(t, b, etcdv1alpha1.ConditionReady, etcdv1alpha1.ReasonClusterNotFound, etcdv1alpha1.BackupPending)
	expectEvent(t, b, corev1.EventTypeNormal, "ClaimProvisioned", "snapshots")
}

func TestBackupUsesAnExistingClaimAsItIs(t *testing.T) {
	namespace := restrictedNamespace(t)
	class := "fast"
	existing := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "snapshots", Namespace: namespace, Labels: map[string]string{"team": "db"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := k8sClient.Create(t.Context(), existing); err != nil {
		t.Fatal(err)
	}
	b := newBackup(t, namespace, "nowhere", provisioned("snapshots", "256Mi", "slow"))
	waitBackupCondition(t, b, etcdv1alpha1.ConditionReady, etcdv1alpha1.ReasonClusterNotFound, etcdv1alpha1.BackupPending)
	after := &corev1.PersistentVolumeClaim{}
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(existing), after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != existing.ResourceVersion {
		t.Errorf("the existing claim was changed: %+v, labels %v", after.Spec, after.Labels)
	}
	expectNoEvent(t, b, "ClaimProvisioned")
}

func TestBackupToAMissingClaimSaysWhichAndHowToFixIt(t *testing.T) {
	b := newBackup(t, restrictedNamespace(t), "nowhere", func(b *etcdv1alpha1.EtcdBackup) {
		b.Spec.Destination.PVC = &etcdv1alpha1.PVCLocation{ClaimName: "no-such-claim"}
	})
	// The claim is what the user must act on; the cluster being missing too is said once the
	// claim is there.
	waitBackupCondition(t, b, etcdv1alpha1.ConditionReady, etcdv1alpha1.ReasonClaimNotFound, etcdv1alpha1.BackupPending)
	cond := meta.FindStatusCondition(b.Status.Conditions, etcdv1alpha1.ConditionReady)
	for _, want := range []string{"no-such-claim", "pvc.provision"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("Ready says %q, which does not name %q", cond.Message, want)
		}
	}
	expectEvent(t, b, corev1.EventTypeWarning, etcdv1alpha1.ReasonClaimNotFound, "no-such-claim")
	expectNoJobs(t, b)
}

// expectEvent waits for an event of the type and reason about b whose note names what.
func expectEvent(t *testing.T, b *etcdv1alpha1.EtcdBackup, eventType, reason, what string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		events := &eventsv1.EventList{}
		if err := k8sClient.List(t.Context(), events, client.InNamespace(b.Namespace)); err != nil {
			return err
		}
		var seen []string
		for _, e := range events.Items {
			if e.Regarding.Name == b.Name && e.Type == eventType && e.Reason == reason && strings.Contains(e.Note, what) {
				return nil
			}
			seen = append(seen, fmt.Sprintf("%s %s %q", e.Type, e.Reason, e.Note))
		}
		return fmt.Errorf("no %s event %s naming %s among %q", eventType, reason, what, seen)
	})
}

func expectNoEvent(t *testing.T, b *etcdv1alpha1.EtcdBackup, reason string) {
	t.Helper()
	events := &eventsv1.EventList{}
	if err := k8sClient.List(t.Context(), events, client.InNamespace(b.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Regarding.Name == b.Name && e.Reason == reason {
			t.Errorf("event %s %q", e.Reason, e.Note)
		}
	}
}
