package controllers

import (
	"context"
	"errors"
	"testing"

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
	"github.com/etcd-database/etcd-operator/internal/membership"
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
			r := &EtcdClusterReconciler{Client: c, DefaultRepository: "registry.test/etcd"}
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
