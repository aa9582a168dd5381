//go:build tools

// Package tools pins opm, which renders, validates and serves the file-based catalog, and
// grpc_health_probe, which OLM's catalog pods run as their probes.
package tools

import (
	_ "github.com/grpc-ecosystem/grpc-health-probe"
	_ "github.com/operator-framework/operator-registry/cmd/opm"
)
