//go:build tools

// Package tools pins promtool, which unit-tests the alert rules of config/prometheus
// (make test-alerts).
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
