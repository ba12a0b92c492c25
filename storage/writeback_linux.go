package storage

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing [off, off+n) of f to
// disk without waiting, so that the fsync at the end of a download has
// little left to do. Errors are ignored: the fsync is what counts.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// preallocate reserves disk blocks for a download of size bytes, so that a
// disk too small fails the download at its start, not halfway, and chunks
// written out of order fill allocated space rather than holes. Only a lack
// of space is an error: a filesystem without fallocate writes sparsely.
func preallocate(f *os.File, size int64) error {
	if size <= 0 {
		return nil
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return err
	}
	return nil
}
