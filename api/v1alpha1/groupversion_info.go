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

// DefaultEtcdVersion is the etcd version of a cluster that names none: spec.version's default
// in the CRD (a marker cannot name this constant; api's contract tests check the two agree), and
// the version an etcd image pinned by digest without a version tag is taken to be.
const DefaultEtcdVersion = "3.6.16"

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "etcd.database.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	//nolint:staticcheck // the kubebuilder layout's builder; this package already imports controller-runtime for it alone
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
