//go:build tools

// Package tools pins Prometheus, which make test-monitoring runs on the local cluster against
// the operator's and the members' metrics and the alert rules of config/prometheus.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
