// Package storage owns an agent's local state on disk: a pebble key-value
// database (identity, last known mesh state, policies, manifests) and, with
// the artifacts work, a content-addressed blob store.
//
//	db, err := storage.Open(storage.Options{Dir: "/var/lib/strata/db"})
//	if err != nil { ... }
//	defer db.Close()
//	err = db.Put([]byte("k"), []byte("v")) // synced before it returns
//
// Artifacts. A Store (OpenStore) keeps blobs on disk named by their SHA-256
// (Dir/blobs/sha256/<aa>/<digest>) and, in the DB under "art/", signed
// manifests, pins and the progress of resumable downloads. A Manifest names
// a model or dataset version, its digest, size and chunk digests and is
// signed with an ed25519 key over Manifest.Canonical; the store accepts only
// manifests signed by one of StoreOptions.Trusted (ErrUnsigned,
// ErrUnknownSigner, ErrBadSignature), and loads a blob (OpenBlob, ModelFile)
// only through a manifest that verifies. Blobs appear by rename after their
// digest is checked and their bytes and directory fsynced, so a crash leaves
// the whole blob or none; OpenStore removes what interrupted writes left.
// Downloads go through a Partial (OpenPartial): chunks in any order, each
// verified on write, resumable after a restart, installed by Commit once the
// whole digest matches. GC removes blobs that no manifest names and nothing
// pins (Pin, or StoreOptions.Pinned).
//
//	st, _ := storage.OpenStore(storage.StoreOptions{Dir: dir, DB: db, Trusted: keys})
//	m, _ := st.Publish(ctx, file, storage.PublishSpec{Kind: storage.KindModel, Name: "scorer", Version: "v3"}, signingKey)
//	path, m, _ := st.ModelFile("scorer", "") // latest verified version
package storage
