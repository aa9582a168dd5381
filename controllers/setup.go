// Package controllers holds the three reconcilers, one file each, and the small helpers they
// share.
package controllers

import (
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/operator-framework/operator-lib/conditions"

	"github.com/etcd-database/etcd-operator/internal/etcd"
	"github.com/etcd-database/etcd-operator/internal/resources"
)

// Options are the settings the reconcilers share.
type Options struct {
	// DefaultEtcdImages are the etcd images of clusters that name no repository: the one the
	// operator was installed with (RELATED_IMAGE_ETCD).
	DefaultEtcdImages resources.EtcdImages
	// Pods are what the install and the platform give the pods the operator creates (OLM's
	// proxy settings, the platform's own pod IDs).
	Pods resources.PodSettings
	// AgentImage is the operator's own image, which its backup and restore Jobs run.
	AgentImage string
	// CertManager: the API server serves cert-manager's Certificates (cert-manager.io/v1).
	CertManager bool
	// UpgradeableCondition is OLM's Upgradeable condition for this operator; nil outside OLM.
	UpgradeableCondition conditions.Condition
	// ArchiverReports reads the archivers' reports; nil reads them from their pods over HTTP.
	ArchiverReports ArchiverReports
	// EtcdDial connects to a cluster's members; nil is etcd.New. The scale benchmark gives
	// scripted members (etcdfake), so that one process runs more clusters than a node holds.
	EtcdDial func(etcd.Config) (etcd.Client, error)
}

// SetupWithManager registers every reconciler with the manager.
func SetupWithManager(mgr ctrl.Manager, opts Options) error {
	dial := opts.EtcdDial
	if dial == nil {
		dial = etcd.New
	}
	clusters := &EtcdClusterReconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Recorder:      mgr.GetEventRecorder("etcdcluster-controller"),
		Etcd:          etcd.NewCacheWith(dial),
		DefaultImages: opts.DefaultEtcdImages,
		Pods:          opts.Pods,
		AgentImage:    opts.AgentImage,
		CertManager:   opts.CertManager,
	}
	reconcilers := []interface {
		SetupWithManager(ctrl.Manager) error
	}{
		clusters,
		&EtcdBackupReconciler{
			Client:          mgr.GetClient(),
			APIReader:       mgr.GetAPIReader(),
			Recorder:        mgr.GetEventRecorder("etcdbackup-controller"),
			AgentImage:      opts.AgentImage,
			DefaultImages:   opts.DefaultEtcdImages,
			Pods:            opts.Pods,
			ArchiverReports: opts.ArchiverReports,
			Now:             time.Now,
		},
		&EtcdRestoreReconciler{
			Client:        mgr.GetClient(),
			APIReader:     mgr.GetAPIReader(),
			Recorder:      mgr.GetEventRecorder("etcdrestore-controller"),
			AgentImage:    opts.AgentImage,
			DefaultImages: opts.DefaultEtcdImages,
			Pods:          opts.Pods,
			Now:           time.Now,
			Keyspaces:     clusters.KeyspacesAt,
		},
	}
	if opts.UpgradeableCondition != nil {
		reconcilers = append(reconcilers, &UpgradeableReconciler{Client: mgr.GetClient(), Condition: opts.UpgradeableCondition})
	}
	for _, r := range reconcilers {
		if err := r.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up %T: %w", r, err)
		}
	}
	return nil
}
