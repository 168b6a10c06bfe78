//go:build nochdb

// Package chdbstore is the embedded store back-end. This binary was built
// with -tags nochdb, without it: the "chdb" scheme is registered so that
// store.Open explains what to do instead of naming an unknown scheme.
package chdbstore

import (
	"context"
	"errors"
	"net/url"

	"github.com/lowbarena/lowbarena/platform/store"
)

// Scheme is the URL scheme this adapter registers.
const Scheme = "chdb"

// ErrNotBuilt is returned by Open in a binary built with -tags nochdb.
var ErrNotBuilt = errors.New("store: this binary was built with -tags nochdb, without the embedded chDB engine; use a ClickHouse server with --store clickhouse://HOST:9000/DB, or build without -tags nochdb")

func init() {
	store.Register(Scheme, func(context.Context, *url.URL) (store.Store, error) {
		return nil, ErrNotBuilt
	})
}
