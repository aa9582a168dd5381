package platform

import (
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
)

// certManagerGroupVersion and certificatesResource are cert-manager's Certificates, which
// provider CertManager makes.
const (
	certManagerGroupVersion = "cert-manager.io/v1"
	certificatesResource    = "certificates"
)

// CertManagerServed tells whether the API server serves cert-manager's Certificates. cert-manager
// is optional: without it the operator runs every other provider, and reports clusters that
// ask for it.
func CertManagerServed(d discovery.ServerResourcesInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(certManagerGroupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s to tell whether cert-manager is installed: %w", certManagerGroupVersion, err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == certificatesResource }), nil
}
