//go:build tools

// Package tools pins etcd's server so `go build go.etcd.io/etcd/server/v3` resolves.
package tools

import _ "go.etcd.io/etcd/server/v3"
