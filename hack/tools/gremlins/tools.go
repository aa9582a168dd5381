//go:build tools

// Package tools pins gremlins.
package tools

import _ "github.com/go-gremlins/gremlins/cmd/gremlins"
