package main

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
)

type pebbleEngine struct {
	db   *pebble.DB
	sync atomic.Bool
	desc string
}

func openPebble(dir string, s settings) (engine, error) {
	var prof *sstable.CompressionProfile
	var compNote string
	switch s.compression {
	case "none":
		prof, compNote = sstable.NoCompression, "none"
	case "lz4":
		// Pebble has no LZ4; its "Fastest" profile (MinLZ on amd64) is the LZ4-class codec.
		prof, compNote = sstable.FastestCompression, "LACKS lz4: Fastest profile (MinLZ) instead"
	case "zstd":
		prof, compNote = sstable.ZstdCompression, "zstd level 3"
	default:
		return nil, fmt.Errorf("unknown compression %q", s.compression)
	}
	cache := pebble.NewCache(s.cacheBytes())
	defer cache.Unref()
	bg := s.bgThreads
	if bg < 1 {
		bg = 1
	}
	opts := &pebble.Options{
		Cache:        cache,
		MemTableSize: uint64(s.memtableBytes()),
		// cairn: one active memtable plus up to two frozen ones.
		MemTableStopWritesThreshold: 3,
		FormatMajorVersion:          pebble.FormatNewest,
		CompactionConcurrencyRange:  func() (int, int) { return 1, bg },
		Logger:                      quietLogger{},
	}
	for i := range opts.Levels {
		l := &opts.Levels[i]
		l.BlockSize = s.blockSize
		if s.bloomBits > 0 {
			l.FilterPolicy = bloom.FilterPolicy(s.bloomBits)
		} else {
			l.FilterPolicy = pebble.NoFilterPolicy
		}
		l.Compression = func() *sstable.CompressionProfile { return prof }
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	dur := "nosync (pebble.NoSync)"
	if s.durability == "groupsync" {
		dur = "groupsync (pebble.Sync, group-committed by the commit pipeline)"
	}
	e := &pebbleEngine{db: db}
	e.desc = fmt.Sprintf("pebble v2.1 (format newest): memtable %d MiB (stop writes at 3 queued), block %d B, bloom %d bits/key on every level, "+
		"compression %s, cache %d MiB, up to %d concurrent compactions (+ flush), durability %s",
		s.memtableMB, s.blockSize, s.bloomBits, compNote, s.cacheMB, bg, dur)
	return e, nil
}

func (e *pebbleEngine) name() string     { return "pebble" }
func (e *pebbleEngine) settings() string { return e.desc }
func (e *pebbleEngine) setSync(b bool)   { e.sync.Store(b) }

func (e *pebbleEngine) read(key []byte) (bool, error) {
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_ = v
	return true, closer.Close()
}

func (e *pebbleEngine) update(key, value []byte) error {
	wo := pebble.NoSync
	if e.sync.Load() {
		wo = pebble.Sync
	}
	return e.db.Set(key, value, wo)
}

func (e *pebbleEngine) insertBatch(keys, values [][]byte) error {
	b := e.db.NewBatch()
	for i := range keys {
		if err := b.Set(keys[i], values[i], nil); err != nil {
			return err
		}
	}
	wo := pebble.NoSync
	if e.sync.Load() {
		wo = pebble.Sync
	}
	return b.Commit(wo)
}

func (e *pebbleEngine) scan(start []byte, n int) (int, error) {
	it, err := e.db.NewIter(nil)
	if err != nil {
		return 0, err
	}
	count := 0
	for ok := it.SeekGE(start); ok && count < n; ok = it.Next() {
		if _, err := it.ValueAndErr(); err != nil {
			it.Close()
			return count, err
		}
		count++
	}
	return count, it.Close()
}

func (e *pebbleEngine) flushAndClose() error {
	if err := e.db.Flush(); err != nil {
		return err
	}
	return e.db.Close()
}

// quietLogger drops pebble's informational messages (they would interleave with the harness's
// progress lines) and keeps errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{}) {}
func (quietLogger) Errorf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
	os.Exit(1)
}
