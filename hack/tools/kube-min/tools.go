//go:build tools

// Package tools pins kube-apiserver, the one command this module builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
