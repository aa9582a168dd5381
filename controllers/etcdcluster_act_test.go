package controllers

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/membership"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// A cluster whose namespace is being deleted goes with it: a step that cannot create anything
// there is dropped, not retried with backoff against the API server until the cluster is gone.
// Any other failure to create is retried.
func TestStepInTerminatingNamespaceIsDroppedOtherFailuresRetried(t *testing.T) {
	terminating := &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
		Message: `persistentvolumeclaims "x" is forbidden: unable to create new content in namespace gone because it is being terminated`,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}},
	}}
	for _, tc := range []struct {
		name      string
		createErr error
		wantErr   bool
	}{
		{"namespace terminating", terminating, false},
		{"other failure", apierrors.NewServiceUnavailable("try again"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := errors.Join(clientgoscheme.AddToScheme(scheme), etcdv1alpha1.AddToScheme(scheme)); err != nil {
				t.Fatal(err)
			}
			creates := 0
			c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
					creates++
					return tc.createErr
				},
			}).Build()
			r := &EtcdClusterReconciler{Client: c, DefaultImages: resources.EtcdImages{Repository: "registry.test/etcd"}}
			cluster := &etcdv1alpha1.EtcdCluster{
				ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "gone", UID: "uid"},
				Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16"},
			}
			result, err := r.act(t.Context(), cluster, &observation{}, membership.Step{Action: membership.Bootstrap, Size: 3})
			if creates == 0 {
				t.Fatal("the step created nothing: the test does not exercise a failed create")
			}
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("act returned error %v, want an error: %t", err, tc.wantErr)
			}
			if !tc.wantErr && result != (ctrl.Result{}) {
				t.Fatalf("act asked to come back (%+v) for a cluster whose namespace is going", result)
			}
		})
	}
}

// A member is removed from etcd before its pod is deleted: a pod deleted first would be a
// voter down, costing quorum margin until the removal. And a removal etcd refuses deletes
// nothing.
func TestScaleDownRemovesTheMemberBeforeItsPod(t *testing.T) {
	a := newScriptedCluster(t, 3, func(c *etcdv1alpha1.EtcdCluster) { c.Spec.Size = 2 }, nil)
	var deleted []string
	a.r.Client = interceptor.NewClient(a.r.Client.(client.WithWatch), interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, pod := obj.(*corev1.Pod); pod {
				name := obj.GetLabels()[resources.LabelMember]
				if slices.ContainsFunc(a.etcd.Members, func(m etcd.Member) bool { return m.Name == name }) {
					t.Errorf("pod of member %s deleted while etcd still lists it (calls so far: %v)", name, a.etcd.Calls)
				}
				deleted = append(deleted, name)
			}
			return c.Delete(ctx, obj, opts...)
		},
	})

	a.etcd.Fail = map[string]error{"RemoveMember": errors.New("etcdserver: request timed out")}
	if _, err := a.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.cluster)}); err == nil {
		t.Fatal("a reconcile whose removal etcd refused reported success")
	}
	if !slices.Contains(a.etcd.Calls, "RemoveMember") {
		t.Fatalf("the scale-down did not try to remove a member (calls %v): the test exercises nothing", a.etcd.Calls)
	}
	if len(deleted) > 0 || len(a.etcd.Members) != 3 {
		t.Fatalf("after a refused removal: pods deleted %v, etcd members %d; want none deleted, 3", deleted, len(a.etcd.Members))
	}

	a.etcd.Fail = nil
	for range 5 {
		if a.reconcile(t, 1); len(deleted) > 0 {
			break
		}
	}
	if len(a.etcd.Members) != 2 || len(deleted) != 1 {
		t.Fatalf("after the scale-down: etcd members %d, pods deleted %v; want 2 and one pod", len(a.etcd.Members), deleted)
	}
}

// A learner that has not caught up is asked again shortly, with no error (it is the normal
// course of a join) and nothing else changed; a promotion that fails for another reason is an
// error, and leaves nothing half-done either.
func TestPromoteThatFailsChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"learner not ready", etcd.ErrLearnerNotReady, false},
		{"promotion fails", errors.New("etcdserver: request timed out"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newScriptedCluster(t, 4, nil, nil)
			learner := &a.etcd.Members[3]
			learner.IsLearner = true
			st := a.etcd.Statuses[learner.ClientURLs[0]]
			st.IsLearner = true
			a.etcd.Statuses[learner.ClientURLs[0]] = st
			unlabelVoter(t, a.k8s, learner.Name) // as the operator leaves a learner's pod
			a.etcd.Fail = map[string]error{"PromoteLearner": tc.err}
			podsBefore, claimsBefore := memberObjects(t, a.k8s)

			result, err := a.r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.cluster)})

			if !slices.Equal(a.etcd.Calls, []string{"PromoteLearner"}) {
				t.Fatalf("etcd calls %v, want one promotion and nothing else", a.etcd.Calls)
			}
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("reconcile error %v, want an error: %t", err, tc.wantErr)
			}
			if !tc.wantErr && result.RequeueAfter == 0 {
				t.Fatalf("a learner not ready is not looked at again: %+v", result)
			}
			if !a.etcd.Members[3].IsLearner || len(a.etcd.Members) != 4 {
				t.Fatalf("etcd membership changed: %+v", a.etcd.Members)
			}
			podsAfter, claimsAfter := memberObjects(t, a.k8s)
			if !maps.Equal(podsBefore, podsAfter) || !maps.Equal(claimsBefore, claimsAfter) {
				t.Fatalf("member objects changed by a promotion that did not happen:\npods %v -> %v\nclaims %v -> %v", podsBefore, podsAfter, claimsBefore, claimsAfter)
			}
		})
	}
}

// memberObjects are the pods and claims in k8s, each name with its resourceVersion: any
// create, delete or change shows.
func memberObjects(t *testing.T, k8s client.Client) (pods, claims map[string]string) {
	t.Helper()
	podList, claimList := &corev1.PodList{}, &corev1.PersistentVolumeClaimList{}
	if err := errors.Join(k8s.List(t.Context(), podList), k8s.List(t.Context(), claimList)); err != nil {
		t.Fatal(err)
	}
	pods, claims = map[string]string{}, map[string]string{}
	for _, p := range podList.Items {
		pods[p.Name] = p.ResourceVersion
	}
	for _, c := range claimList.Items {
		claims[c.Name] = c.ResourceVersion
	}
	return pods, claims
}

// unlabelVoter takes the voter label off member's pod.
func unlabelVoter(t *testing.T, k8s client.Client, member string) {
	t.Helper()
	pod := &corev1.Pod{}
	if err := k8s.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: member}, pod); err != nil {
		t.Fatal(err)
	}
	delete(pod.Labels, resources.LabelVoter)
	if err := k8s.Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
}

// Behind a proxy, OLM gives the operator HTTP_PROXY, HTTPS_PROXY and NO_PROXY, and the operator
// gives them to its Jobs, which reach object storage. Never to the members: etcd's peer transport
// takes the proxy from its environment, and with a NO_PROXY that does not list the members' peer
// names (no ".svc") every member sent its peers' traffic to the proxy and none became ready
// (seen on the local cluster, 2026-11-27). Members need nothing outside the cluster.
func TestMemberPodsNeverTakeTheOperatorsProxy(t *testing.T) {
	k8s := fake.NewClientBuilder().WithScheme(testScheme(t)).Build()
	r := &EtcdClusterReconciler{Client: k8s, DefaultImages: resources.EtcdImages{Repository: "registry.test/etcd"},
		Pods: resources.PodSettings{Env: []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://proxy:3128"}, {Name: "HTTP_PROXY", Value: "http://proxy:3128"}, {Name: "NO_PROXY", Value: "10.96.0.0/12"}}}}
	cluster := &etcdv1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid"},
		Spec:       etcdv1alpha1.EtcdClusterSpec{Size: 3, Version: "3.6.16"},
	}
	if _, err := r.act(t.Context(), cluster, &observation{}, membership.Step{Action: membership.Bootstrap, Size: 3}); err != nil {
		t.Fatal(err)
	}
	pods := &corev1.PodList{}
	if err := k8s.List(t.Context(), pods); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 3 {
		t.Fatalf("%d member pods made, want 3: the test proves nothing", len(pods.Items))
	}
	for _, pod := range pods.Items {
		for _, c := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			for _, env := range c.Env {
				if strings.HasSuffix(strings.ToUpper(env.Name), "_PROXY") {
					t.Errorf("member pod %s's container %s has %s=%s: etcd would send its peers' traffic to the proxy", pod.Name, c.Name, env.Name, env.Value)
				}
			}
		}
	}
}

// A cluster with nothing to do is looked at again every requeueSteady on average, but not all
// clusters at the same moment: each look is drawn within steadyLookSpread of it.
func TestSteadyLooksAreSpread(t *testing.T) {
	r := &EtcdClusterReconciler{}
	lowest, highest := requeueSteady-time.Duration(float64(requeueSteady)*steadyLookSpread), requeueSteady+time.Duration(float64(requeueSteady)*steadyLookSpread)
	var sum time.Duration
	seconds := map[time.Duration]bool{}
	const looks = 1000
	for range looks {
		result, err := r.act(t.Context(), &etcdv1alpha1.EtcdCluster{}, &observation{}, membership.Step{Action: membership.Wait, Operation: membership.OpNone})
		if err != nil {
			t.Fatal(err)
		}
		if result.RequeueAfter < lowest || result.RequeueAfter > highest {
			t.Fatalf("looked at again after %v, want within %v to %v", result.RequeueAfter, lowest, highest)
		}
		sum += result.RequeueAfter
		seconds[result.RequeueAfter.Truncate(time.Second)] = true
	}
	if mean := sum / looks; mean < requeueSteady-time.Second || mean > requeueSteady+time.Second {
		t.Errorf("looked at again after %v on average, want about %v", mean, requeueSteady)
	}
	if len(seconds) < 10 {
		t.Errorf("%d looks fell in %d distinct seconds, want them spread over the %v to %v window", looks, len(seconds), lowest, highest)
	}
}
