package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchStatusIfChanged writes obj's status with a merge patch against before, and only when
// the status differs: an idle operator must not write to the API server. The patch carries
// before's resourceVersion, so a reconcile that started from a stale cached copy cannot
// overwrite what a newer one wrote; that conflict is dropped, as the newer write's own watch
// event brings the object back with the current status.
func patchStatusIfChanged(ctx context.Context, c client.Client, obj client.Object, before client.Object, statusOf func(client.Object) any) error {
	if equality.Semantic.DeepEqual(statusOf(before), statusOf(obj)) {
		return nil
	}
	err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}
