//go:build tools

// Package tools pins CoreDNS, the cluster DNS of the local test cluster.
package tools

import (
	_ "github.com/coredns/coredns"
)
