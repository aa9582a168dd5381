//go:build tools

// Package tools pins etcdctl and etcdutl, built straight from their own main packages.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
)
