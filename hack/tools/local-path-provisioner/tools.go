//go:build tools

// Package tools pins local-path-provisioner, the default StorageClass of the local test cluster.
package tools

import (
	_ "github.com/rancher/local-path-provisioner"
)
