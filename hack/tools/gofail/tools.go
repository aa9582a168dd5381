//go:build tools

// Package tools pins gofail.
package tools

import _ "go.etcd.io/gofail"
