// Package platform tells what the Kubernetes distribution the operator runs on decides for the
// pods it creates, from what its API server serves: nothing for a user to set.
package platform

import (
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
)

// Platform is what the distribution decides for the operator's pods.
type Platform struct {
	// Name is the distribution, as logs and docs say it: "OpenShift" or "Kubernetes".
	Name string
	// AssignsPodIDs means admission gives every pod its user ID and filesystem group from its
	// namespace's range, and refuses pods that bring IDs outside that range: OpenShift's
	// security context constraints (restricted-v2 by default). Pods then leave their IDs unset.
	AssignsPodIDs bool
}

// Kubernetes is a distribution that admits the IDs a pod asks for.
var Kubernetes = Platform{Name: "Kubernetes"}

// OpenShift assigns pod IDs through its security context constraints.
var OpenShift = Platform{Name: "OpenShift", AssignsPodIDs: true}

// securityContextConstraintsGroup is the API of the admission that assigns pod IDs; OpenShift
// and OKD serve it, and nothing else does. An API group, not a version number or a label, so
// that every OpenShift release, present and future, is recognised for what it enforces.
const securityContextConstraintsGroup = "security.openshift.io"

// Detect reads the API groups the server serves. The manager does not start on a platform it
// cannot tell: pods made for the wrong one are refused (fixed IDs on OpenShift) or lack the
// filesystem group that lets them write their volumes (elsewhere).
func Detect(d discovery.ServerGroupsInterface) (Platform, error) {
	groups, err := d.ServerGroups()
	if err != nil {
		return Platform{}, fmt.Errorf("discover the API groups to tell the platform: %w", err)
	}
	if slices.ContainsFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == securityContextConstraintsGroup }) {
		return OpenShift, nil
	}
	return Kubernetes, nil
}
