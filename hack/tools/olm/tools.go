//go:build tools

// Package tools pins OLM (operator-lifecycle-manager), whose olm, catalog, copy-content and
// package-server commands `make olm-up` runs on the local cluster, and its cpb, which the catalog
// operator's bundle unpack Jobs copy out of the same image.
package tools

import (
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/catalog"
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/copy-content"
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/olm"
	_ "github.com/operator-framework/operator-lifecycle-manager/cmd/package-server"
	_ "github.com/operator-framework/operator-lifecycle-manager/util/cpb"
)
