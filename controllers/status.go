package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchStatusIfChanged writes obj's status with a merge patch against before, and only when
// the status differs: an idle operator must not write to the API server. The patch carries
// before's resourceVersion, so a reconcile that started from a stale cached copy cannot
// overwrite what a newer one wrote; that conflict is dropped, as the newer write's own watch
// event brings the object back with the current status.
func patchStatusIfChanged(ctx context.Context, c client.Client, obj client.Object, before client.Object, statusOf func(client.Object) any) error {
	if err := writeStatusNow(ctx, c, obj, before, statusOf); !apierrors.IsConflict(err) {
		return err
	}
	return nil
}

// writeStatusNow is patchStatusIfChanged that returns a conflict; the caller then makes before
// a copy of obj. It comes before a step that must follow the record (deleting the Job that
// holds a run's result), and the next reconcile, from fresh objects, must record again rather
// than go on.
func writeStatusNow(ctx context.Context, c client.Client, obj, before client.Object, statusOf func(client.Object) any) error {
	if equality.Semantic.DeepEqual(statusOf(before), statusOf(obj)) {
		return nil
	}
	if err := c.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

// setConditionAt sets a condition in conditions, obj's own, as of obj's generation: the one
// place the reconcilers make a condition.
func setConditionAt(conditions *[]metav1.Condition, obj client.Object, condType string, status metav1.ConditionStatus, reason, format string, args ...any) {
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: fmt.Sprintf(format, args...), ObservedGeneration: obj.GetGeneration(),
	})
}

// conditionSays is the reason and message of the condition of condType, as key-values for a
// log line: the step logs say why in the words status does.
func conditionSays(conditions []metav1.Condition, condType string) []any {
	c := meta.FindStatusCondition(conditions, condType)
	if c == nil {
		return nil
	}
	return []any{"reason", c.Reason, "message", c.Message}
}
