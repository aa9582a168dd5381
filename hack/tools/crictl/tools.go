//go:build tools

// Package tools pins crictl, used to inspect and clean up the local test cluster's containers.
package tools

import (
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
