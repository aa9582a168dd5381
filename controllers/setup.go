// Package controllers holds the three reconcilers, one file each, and the small helpers they
// share.
package controllers

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
)

// SetupWithManager registers every reconciler with the manager.
func SetupWithManager(mgr ctrl.Manager) error {
	reconcilers := []interface {
		SetupWithManager(ctrl.Manager) error
	}{
		&EtcdClusterReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("etcdcluster-controller")},
		&EtcdBackupReconciler{Client: mgr.GetClient()},
		&EtcdRestoreReconciler{Client: mgr.GetClient()},
	}
	for _, r := range reconcilers {
		if err := r.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up %T: %w", r, err)
		}
	}
	return nil
}
