//go:build tools

// Package tools pins cert-manager's controller, webhook and cainjector, which
// `make cert-manager-up` runs on the local cluster.
package tools

import (
	_ "github.com/cert-manager/cert-manager/cainjector-binary"
	_ "github.com/cert-manager/cert-manager/controller-binary"
	_ "github.com/cert-manager/cert-manager/webhook-binary"
)
