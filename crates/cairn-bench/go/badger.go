package main

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

type badgerEngine struct {
	db   *badger.DB
	sync atomic.Bool
	desc string
}

func openBadger(dir string, s settings) (engine, error) {
	var comp options.CompressionType
	var compNote string
	switch s.compression {
	case "none":
		comp, compNote = options.None, "none"
	case "lz4":
		comp, compNote = options.Snappy, "LACKS lz4: Snappy instead"
	case "zstd":
		comp, compNote = options.ZSTD, "zstd level 3"
	default:
		return nil, fmt.Errorf("unknown compression %q", s.compression)
	}
	// A bloom filter of b bits per key with the optimal hash count has a false-positive rate of
	// about 0.6185^b; badger takes the rate.
	fp := 0.0
	if s.bloomBits > 0 {
		fp = math.Pow(0.6185, float64(s.bloomBits))
	}
	// Badger refuses a single compactor.
	compactors := s.bgThreads
	if compactors < 2 {
		compactors = 2
	}
	opts := badger.DefaultOptions(dir).
		WithLogger(nil).
		WithMemTableSize(s.memtableBytes()).
		WithNumMemtables(3).
		WithBlockSize(s.blockSize).
		WithBloomFalsePositive(fp).
		WithBlockCacheSize(s.cacheBytes()).
		WithCompression(comp).
		WithZSTDCompressionLevel(3).
		WithNumCompactors(compactors).
		WithDetectConflicts(false).
		WithSyncWrites(false).
		// Values stay in the LSM tree (badger's default threshold is 1 MiB, but it must stay
		// below the largest batch, 15% of the memtable).
		WithValueThreshold(min(1<<20, s.memtableBytes()/10))
	db, err := badger.Open(opts)
	if err != nil {
		return nil, err
	}
	dur := "nosync (SyncWrites=false)"
	if s.durability == "groupsync" {
		dur = "groupsync (DB.Sync after each write: SyncWrites is fixed at open, and the load must not sync; " +
			"so no group commit across writers)"
	}
	e := &badgerEngine{db: db}
	e.desc = fmt.Sprintf("badger v4.9: memtable %d MiB x 3, block %d B, bloom fp %.4f (= %d bits/key), compression %s, "+
		"block cache %d MiB (index cache off: indexes in memory), %d compactors, values inline in the LSM (value threshold %d B), "+
		"conflict detection off, durability %s",
		s.memtableMB, s.blockSize, fp, s.bloomBits, compNote, s.cacheMB, compactors, min(1<<20, s.memtableBytes()/10), dur)
	return e, nil
}

func (e *badgerEngine) name() string     { return "badger" }
func (e *badgerEngine) settings() string { return e.desc }
func (e *badgerEngine) setSync(b bool)   { e.sync.Store(b) }

func (e *badgerEngine) read(key []byte) (bool, error) {
	found := false
	err := e.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return item.Value(func([]byte) error { return nil })
	})
	return found, err
}

func (e *badgerEngine) update(key, value []byte) error {
	err := e.db.Update(func(txn *badger.Txn) error { return txn.Set(key, value) })
	if err != nil {
		return err
	}
	if e.sync.Load() {
		return e.db.Sync()
	}
	return nil
}

// insertBatch uses one WriteBatch, which commits in as many transactions as Badger's size
// limit needs.
func (e *badgerEngine) insertBatch(keys, values [][]byte) error {
	wb := e.db.NewWriteBatch()
	defer wb.Cancel()
	for i := range keys {
		if err := wb.Set(keys[i], values[i]); err != nil {
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	if e.sync.Load() {
		return e.db.Sync()
	}
	return nil
}

func (e *badgerEngine) scan(start []byte, n int) (int, error) {
	count := 0
	err := e.db.View(func(txn *badger.Txn) error {
		o := badger.DefaultIteratorOptions
		o.PrefetchValues = false
		it := txn.NewIterator(o)
		defer it.Close()
		for it.Seek(start); it.Valid() && count < n; it.Next() {
			if err := it.Item().Value(func([]byte) error { return nil }); err != nil {
				return err
			}
			count++
		}
		return nil
	})
	return count, err
}

func (e *badgerEngine) flushAndClose() error {
	if err := e.db.Sync(); err != nil {
		return err
	}
	return e.db.Close()
}
