//go:build tools

// Package tools pins operator-sdk, which generates and validates the OLM bundle.
package tools

import (
	_ "github.com/operator-framework/operator-sdk/cmd/operator-sdk"
)
