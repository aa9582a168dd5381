// Package v1alpha1 is the contract users write YAML against: EtcdCluster, EtcdBackup and
// EtcdRestore in the etcd.database.dev API group.
//
// +kubebuilder:object:generate=true
// +groupName=etcd.database.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "etcd.database.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	//nolint:staticcheck // the kubebuilder layout's builder; this package already imports controller-runtime for it alone
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
