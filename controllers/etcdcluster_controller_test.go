package controllers_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

func TestClusterStatusReportsOnlyWhatIsObserved(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "observed", Namespace: "default"}}
	if err := k8sClient.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", c.Status.ObservedGeneration, c.Generation)
		}
		return nil
	})

	if c.Status.Selector != "etcd.database.dev/cluster=observed" {
		t.Errorf("selector = %q", c.Status.Selector)
	}
	available := meta.FindStatusCondition(c.Status.Conditions, etcdv1alpha1.ConditionAvailable)
	if available == nil || available.Status != metav1.ConditionUnknown {
		t.Errorf("Available = %+v; a build that runs no members must not claim availability either way", available)
	}
	if c.Status.ReadyMembers != 0 || c.Status.Leader != "" || len(c.Status.Members) != 0 {
		t.Errorf("status reports members it never observed: %+v", c.Status)
	}
}

func TestIdleReconcileWritesNothing(t *testing.T) {
	c := &etcdv1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: "default"}}
	if err := k8sClient.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		if c.Status.ObservedGeneration == 0 {
			return fmt.Errorf("not reconciled yet")
		}
		return nil
	})
	settled := c.ResourceVersion

	// A label change triggers a reconcile without changing what status should say.
	c.Labels = map[string]string{"touched": "yes"}
	if err := k8sClient.Update(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	afterLabel := c.ResourceVersion
	time.Sleep(2 * time.Second)
	if err := k8sClient.Get(t.Context(), client.ObjectKeyFromObject(c), c); err != nil {
		t.Fatal(err)
	}
	if c.ResourceVersion != afterLabel {
		t.Fatalf("the reconciler wrote an unchanged status (resourceVersion %s -> %s, settled at %s)", afterLabel, c.ResourceVersion, settled)
	}
}
