package storage

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrNotFound is returned by Get when a key has no value. Every call after
// Close returns ErrClosed.
var ErrNotFound = errors.New("storage: not found")

// Options configures Open. The zero value of every field but Dir is a
// documented default.
type Options struct {
	// Dir is the directory of the database. Required.
	Dir string
	// FS is the file system; nil means the operating system's. Tests pass
	// vfs.NewMem() so they never touch a disk.
	FS vfs.FS
	// Logger receives pebble's errors (at Error) and its informational
	// lines (at Debug); nil discards them.
	Logger *slog.Logger
	// CacheSize is the block cache's size in bytes; 0 means
	// DefaultCacheSize.
	CacheSize int64
	// MemTableSize is the most a memtable holds before it is flushed, in
	// bytes; 0 means DefaultMemTableSize.
	MemTableSize uint64
}

// The defaults of Options, sized for an agent's store: the catalog, a few
// keys of the agent's own, the manifests of the models it holds (model
// bytes are files of their own, see Store). The catalog is held decoded
// in memory too, so the store is read for a record that changed or whose
// value is kept on disk alone: pebble's defaults (an 8 MiB cache and
// 4 MiB memtables, two of them at once while one flushes) were most of the
// memory an idle agent held outside the Go heap.
const (
	DefaultCacheSize    = 2 << 20
	DefaultMemTableSize = 2 << 20
)

// DB is a pebble database with the few operations strata needs. It is safe
// for concurrent use, and for calls racing with Close (they get ErrClosed).
type DB struct {
	mu sync.RWMutex // write-held only by Close
	db *pebble.DB
}

// Open opens (creating if needed) the database in opts.Dir.
func Open(opts Options) (*DB, error) {
	if opts.Dir == "" {
		return nil, errors.New("storage: Options.Dir is required")
	}
	po := &pebble.Options{
		Logger:       pebbleLogger{log: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)).With("component", "pebble")},
		CacheSize:    cmp.Or(opts.CacheSize, DefaultCacheSize),
		MemTableSize: cmp.Or(opts.MemTableSize, DefaultMemTableSize),
	}
	if opts.FS != nil {
		po.FS = opts.FS
	}
	db, err := pebble.Open(opts.Dir, po)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", opts.Dir, err)
	}
	return &DB{db: db}, nil
}

// Get returns a copy of the value of key, or ErrNotFound.
func (d *DB) Get(key []byte) ([]byte, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.db == nil {
		return nil, ErrClosed
	}
	v, closer, err := d.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("storage: get: %w", err)
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

// Put writes key=value and syncs the write-ahead log before it returns, so
// an acknowledged write survives a crash.
func (d *DB) Put(key, value []byte) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.db == nil {
		return ErrClosed
	}
	if err := d.apply([]batchOp{{key: key, value: value}}, pebble.Sync); err != nil {
		return fmt.Errorf("storage: put: %w", err)
	}
	return nil
}

// Delete removes key, synced. Deleting a missing key is not an error.
func (d *DB) Delete(key []byte) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.db == nil {
		return ErrClosed
	}
	if err := d.apply([]batchOp{{key: key, del: true}}, pebble.Sync); err != nil {
		return fmt.Errorf("storage: delete: %w", err)
	}
	return nil
}

// Batch is a set of writes applied atomically by Commit.
type Batch struct {
	d   *DB
	ops []batchOp
}

type batchOp struct {
	key, value []byte
	del        bool
}

// NewBatch starts an empty batch.
func (d *DB) NewBatch() *Batch { return &Batch{d: d} }

// Put adds key=value to the batch.
func (b *Batch) Put(key, value []byte) {
	b.ops = append(b.ops, batchOp{key: bytes.Clone(key), value: bytes.Clone(value)})
}

// Delete adds the removal of key to the batch.
func (b *Batch) Delete(key []byte) { b.ops = append(b.ops, batchOp{key: bytes.Clone(key), del: true}) }

// Commit applies the batch atomically. With sync the write-ahead log is
// synced before Commit returns.
func (b *Batch) Commit(sync bool) error {
	b.d.mu.RLock()
	defer b.d.mu.RUnlock()
	if b.d.db == nil {
		return ErrClosed
	}
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	if err := b.d.apply(b.ops, opt); err != nil {
		return fmt.Errorf("storage: commit: %w", err)
	}
	return nil
}

// maxRetainedBatch is the largest write buffer pebble keeps for reuse
// once a write is done. Its default (1 MiB) kept the buffers of an
// agent's large writes (a node document lists every assignment and
// replica of the node: hundreds of kilobytes at 10,000 policies) in
// pebble's pool between collections; at 10,000 policies they were an
// eighth of the heap of BenchmarkManyPolicies' idle agents.
const maxRetainedBatch = 64 << 10

// apply writes ops atomically in one pebble batch sized for them. The
// caller holds d.mu for reading and has checked d.db.
func (d *DB) apply(ops []batchOp, opt *pebble.WriteOptions) error {
	size := batchrepr.HeaderLen
	for _, op := range ops {
		size += 1 + 2*binary.MaxVarintLen32 + len(op.key) + len(op.value)
	}
	pb := d.db.NewBatchWithSize(size, pebble.WithMaxRetainedSizeBytes(maxRetainedBatch))
	defer pb.Close()
	for _, op := range ops {
		if op.del {
			_ = pb.Delete(op.key, nil)
		} else {
			_ = pb.Set(op.key, op.value, nil)
		}
	}
	return pb.Commit(opt)
}

// Scan calls fn for every key with the given prefix, in key order. The slices
// passed to fn are only valid during the call. An error from fn stops the
// scan and is returned.
func (d *DB) Scan(prefix []byte, fn func(key, value []byte) error) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.db == nil {
		return ErrClosed
	}
	it, err := d.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("storage: scan: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("storage: scan: %w", err)
		}
		if err := fn(it.Key(), v); err != nil {
			return err
		}
	}
	return it.Error()
}

// Close flushes and closes the database. Calling Close twice is safe.
func (d *DB) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.db == nil {
		return nil
	}
	err := d.db.Close()
	d.db = nil
	return err
}

// prefixEnd returns the smallest key greater than every key with prefix, or
// nil when there is none (a prefix of all 0xff).
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// pebbleLogger sends pebble's logs to slog: its chatter (compactions,
// flushes) at Debug, its errors at Error; fatal errors still stop the
// process, as pebble requires.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...interface{}) {
	l.log.Debug(fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Errorf(format string, args ...interface{}) {
	l.log.Error(fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Fatalf(format string, args ...interface{}) {
	l.log.Error(fmt.Sprintf(format, args...))
	panic(fmt.Sprintf("pebble: "+format, args...))
}
