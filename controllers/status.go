package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchStatusIfChanged writes obj's status with a merge patch against before, and only when
// the status differs: an idle operator must not write to the API server.
func patchStatusIfChanged(ctx context.Context, c client.Client, obj client.Object, before client.Object, statusOf func(client.Object) any) error {
	if equality.Semantic.DeepEqual(statusOf(before), statusOf(obj)) {
		return nil
	}
	return c.Status().Patch(ctx, obj, client.MergeFrom(before))
}
