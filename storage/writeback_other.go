//go:build !linux

package storage

import "os"

// startWriteback is a no-op where sync_file_range does not exist; the
// fsync at the end of a download does all the writing.
func startWriteback(*os.File, int64, int64) {}

// preallocate is a no-op where fallocate does not exist.
func preallocate(*os.File, int64) error { return nil }
