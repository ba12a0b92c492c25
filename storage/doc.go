// Package storage owns an agent's local state on disk: a pebble key-value
// database (identity, last known mesh state, policies, manifests) and, with
// the artifacts work, a content-addressed blob store.
//
//	db, err := storage.Open(storage.Options{Dir: "/var/lib/strata/db"})
//	if err != nil { ... }
//	defer db.Close()
//	err = db.Put([]byte("k"), []byte("v")) // synced before it returns
package storage
