// Command cairnbench-peers replays a cairn-bench YCSB op stream against Pebble v2 or Badger v4
// and prints one JSON line in the schema of cairn-bench's RunResult (crates/cairn-bench/src/runner.rs).
//
// It takes the same flags as `cairn-bench ycsb-run-one`:
//
//	cairnbench-peers --engine pebble|badger --stream FILE --db DIR --threads N \
//	    --cache-mb 64 --memtable-mb 64 --block-size 4096 --bloom-bits 10 \
//	    --compression none|lz4|zstd --bg-threads 2 --durability nosync|groupsync
//
// The stream format is documented in crates/cairn-bench/src/stream.rs. Op i of a phase goes to
// thread i % N, the load phase never fsyncs per op, and --durability governs the run phase,
// exactly as on the Rust side. Measurements are read from /proc the same way.
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	magic     = "CAIRNYCS"
	version   = 1
	headerLen = 64
	opLen     = 16
	poolSpan  = 1 << 20
)

const (
	opInsert = 1
	opRead   = 2
	opUpdate = 3
	opScan   = 4
	opRMW    = 5
)

type settings struct {
	cacheMB, memtableMB     uint64
	blockSize, bloomBits    int
	compression, durability string
	bgThreads               int
	loadBatch               int
}

func (s settings) cacheBytes() int64    { return int64(s.cacheMB << 20) }
func (s settings) memtableBytes() int64 { return int64(s.memtableMB << 20) }

// engine is the Go twin of the Rust Engine trait.
type engine interface {
	name() string
	settings() string
	setSync(bool)
	read(key []byte) (bool, error)
	update(key, value []byte) error
	// insertBatch writes new keys in one batch (the load phase with --load-batch above 1).
	insertBatch(keys, values [][]byte) error
	scan(start []byte, n int) (int, error)
	flushAndClose() error
}

func rmw(e engine, key, value []byte) (bool, error) {
	found, err := e.read(key)
	if err != nil {
		return false, err
	}
	return found, e.update(key, value)
}

// stream is an opened, checked stream file.
type stream struct {
	path      string
	workload  string
	seed      uint64
	records   uint64
	ops       uint64
	valueSize int
	pool      []byte
}

func openStream(path string) (*stream, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < headerLen+4 {
		return nil, fmt.Errorf("%s: too short for a stream", path)
	}
	h := make([]byte, headerLen)
	if _, err := io.ReadFull(f, h); err != nil {
		return nil, err
	}
	if string(h[:8]) != magic {
		return nil, fmt.Errorf("%s: not a cairn-bench stream", path)
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != version {
		return nil, fmt.Errorf("%s: stream format version %d, expected %d", path, v, version)
	}
	s := &stream{
		path:      path,
		workload:  string(rune(h[12])),
		seed:      binary.LittleEndian.Uint64(h[16:]),
		records:   binary.LittleEndian.Uint64(h[24:]),
		ops:       binary.LittleEndian.Uint64(h[32:]),
		valueSize: int(binary.LittleEndian.Uint32(h[40:])),
	}
	poolLen := int64(binary.LittleEndian.Uint32(h[44:]))
	if poolLen != int64(poolSpan+s.valueSize) {
		return nil, fmt.Errorf("%s: pool length %d does not match", path, poolLen)
	}
	want := headerLen + poolLen + int64(s.records+s.ops)*opLen + 4
	if size != want {
		return nil, fmt.Errorf("%s: %d bytes, expected %d", path, size, want)
	}
	// Whole-file CRC32C.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	crc := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	if _, err := io.CopyN(crc, bufio.NewReaderSize(f, 1<<20), size-4); err != nil {
		return nil, err
	}
	var stored [4]byte
	if _, err := f.ReadAt(stored[:], size-4); err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(stored[:]) != crc.Sum32() {
		return nil, fmt.Errorf("%s: checksum mismatch", path)
	}
	s.pool = make([]byte, poolLen)
	if _, err := f.ReadAt(s.pool, headerLen); err != nil {
		return nil, err
	}
	return s, nil
}

// forEach calls fn for thread t's share (ops i with i % threads == t) of a phase.
func (s *stream) forEach(run bool, t, threads int, fn func(kind byte, scanLen int, value []byte, key uint64) error) error {
	f, err := os.Open(s.path)
	if err != nil {
		return err
	}
	defer f.Close()
	start := int64(headerLen + len(s.pool))
	n := s.records
	if run {
		start += int64(s.records) * opLen
		n = s.ops
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	var b [opLen]byte
	for i := uint64(0); i < n; i++ {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return err
		}
		if i%uint64(threads) != uint64(t) {
			continue
		}
		kind := b[0]
		if kind < opInsert || kind > opRMW {
			return fmt.Errorf("bad op kind %d", kind)
		}
		off := int(binary.LittleEndian.Uint32(b[4:]))
		if off > poolSpan {
			return fmt.Errorf("value offset %d out of range", off)
		}
		if err := fn(kind, int(b[1]), s.pool[off:off+s.valueSize], binary.LittleEndian.Uint64(b[8:])); err != nil {
			return err
		}
	}
	return nil
}

func formatKey(buf []byte, n uint64) []byte {
	buf = append(buf[:0], "user"...)
	return strconv.AppendUint(buf, n, 10)
}

// hist is a log-linear latency histogram with 11 bits of precision (as hdrhistogram with 3
// significant digits); quantiles report the highest value of their bucket, as hdrhistogram does.
type hist struct {
	counts []uint64
	n      uint64
	sum    float64
}

const subBits = 11

func newHist() *hist { return &hist{counts: make([]uint64, (1<<subBits)+64*(1<<(subBits-1)))} }

func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	s := bits.Len64(v) - subBits
	top := v >> uint(s) // in [1024, 2047]
	return (1 << subBits) + (s-1)*(1<<(subBits-1)) + int(top-(1<<(subBits-1)))
}

func bucketHigh(i int) uint64 {
	if i < 1<<subBits {
		return uint64(i)
	}
	j := i - (1 << subBits)
	s := j/(1<<(subBits-1)) + 1
	top := uint64(j%(1<<(subBits-1))) + (1 << (subBits - 1))
	return ((top + 1) << uint(s)) - 1
}

func (h *hist) record(v uint64) {
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
}

func (h *hist) add(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
}

func (h *hist) quantile(q float64) uint64 {
	if h.n == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(h.n)))
	if want == 0 {
		want = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= want {
			return bucketHigh(i)
		}
	}
	return bucketHigh(len(h.counts) - 1)
}

// result mirrors the Rust RunResult.
type result struct {
	Engine         string  `json:"engine"`
	Settings       string  `json:"settings"`
	Workload       string  `json:"workload"`
	Records        uint64  `json:"records"`
	Ops            uint64  `json:"ops"`
	Threads        uint64  `json:"threads"`
	ValueSize      uint64  `json:"value_size"`
	LoadSecs       float64 `json:"load_secs"`
	LoadOpsPerSec  float64 `json:"load_ops_per_sec"`
	RunSecs        float64 `json:"run_secs"`
	OpsPerSec      float64 `json:"ops_per_sec"`
	MeanUs         float64 `json:"mean_us"`
	P50Us          float64 `json:"p50_us"`
	P99Us          float64 `json:"p99_us"`
	P999Us         float64 `json:"p999_us"`
	CPUSecs        float64 `json:"cpu_secs"`
	CPUUsPerOp     float64 `json:"cpu_us_per_op"`
	UserBytes      uint64  `json:"user_bytes"`
	DiskWriteBytes uint64  `json:"disk_write_bytes"`
	WriteAmp       float64 `json:"write_amp"`
	SpaceBytes     uint64  `json:"space_bytes"`
	PeakRSSBytes   uint64  `json:"peak_rss_bytes"`
	Reads          uint64  `json:"reads"`
	ReadsFound     uint64  `json:"reads_found"`
	Scans          uint64  `json:"scans"`
	ScanKeys       uint64  `json:"scan_keys"`
	Writes         uint64  `json:"writes"`
}

// /proc figures, read as on the Rust side (src/measure.rs).

func cpuSeconds() (float64, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bad /proc/self/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc/self/stat")
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	s, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bad /proc/self/stat times")
	}
	return (u + s) / 100.0, nil
}

func procField(path, name string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, name) {
			v := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(l[len(name):]), "kB"))
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}

// diskWriteBytes is write_bytes of /proc/self/io (pages dirtied; cancelled pages stay counted).
func diskWriteBytes() uint64 { return procField("/proc/self/io", "write_bytes:") }

func peakRSSBytes() uint64 { return procField("/proc/self/status", "VmHWM:") * 1024 }

func diskUsage(dir string) uint64 {
	var total uint64
	seen := map[[2]uint64]bool{}
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		if st, ok := sysStat(info); ok {
			k := [2]uint64{st.dev, st.ino}
			if !seen[k] {
				seen[k] = true
				total += st.blocks * 512
			}
		}
		return nil
	})
	return total
}

func inThreads(threads int, fn func(t int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, threads)
	for t := 0; t < threads; t++ {
		wg.Add(1)
		go func(t int) {
			defer wg.Done()
			errs[t] = fn(t)
		}(t)
	}
	wg.Wait()
	return errors.Join(errs...)
}

func main() {
	var (
		engineName = flag.String("engine", "", "pebble or badger")
		streamPath = flag.String("stream", "", "stream file")
		dbDir      = flag.String("db", "", "database directory (removed first)")
		threads    = flag.Int("threads", 1, "client threads")
		phases     = flag.String("phases", "both", "both|load-only|run-only")
		s          settings
	)
	flag.Uint64Var(&s.cacheMB, "cache-mb", 64, "cache MiB")
	flag.Uint64Var(&s.memtableMB, "memtable-mb", 64, "memtable MiB")
	flag.IntVar(&s.blockSize, "block-size", 4096, "block size")
	flag.IntVar(&s.bloomBits, "bloom-bits", 10, "bloom bits per key")
	flag.StringVar(&s.compression, "compression", "lz4", "none|lz4|zstd")
	flag.IntVar(&s.bgThreads, "bg-threads", 2, "background (compaction) threads")
	flag.StringVar(&s.durability, "durability", "nosync", "nosync|groupsync")
	flag.IntVar(&s.loadBatch, "load-batch", 1, "records per write batch in the load phase")
	flag.Parse()
	if err := run(*engineName, *streamPath, *dbDir, *threads, *phases, s); err != nil {
		fmt.Fprintln(os.Stderr, "cairnbench-peers:", err)
		os.Exit(1)
	}
}

// run does the phases asked ("both", "load-only": load a new database and close it, or
// "run-only": run on the database already at dbDir, a copy of a loaded one).
func run(engineName, streamPath, dbDir string, threads int, phases string, s settings) error {
	if threads < 1 {
		threads = 1
	}
	if phases != "both" && phases != "load-only" && phases != "run-only" {
		return fmt.Errorf("unknown phases %q (both, load-only or run-only)", phases)
	}
	load, runPhase := phases != "run-only", phases != "load-only"
	st, err := openStream(streamPath)
	if err != nil {
		return err
	}
	if load {
		if err := os.RemoveAll(dbDir); err != nil {
			return err
		}
	} else if fi, err := os.Stat(dbDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("no loaded database at %s to run on", dbDir)
	}
	if err := os.MkdirAll(filepath.Dir(dbDir), 0o755); err != nil {
		return err
	}
	io0 := diskWriteBytes()
	var e engine
	switch engineName {
	case "pebble":
		e, err = openPebble(dbDir, s)
	case "badger":
		e, err = openBadger(dbDir, s)
	default:
		err = fmt.Errorf("unknown engine %q (pebble or badger)", engineName)
	}
	if err != nil {
		return err
	}

	e.setSync(false)
	loaded := make([]uint64, threads)
	t0 := time.Now()
	err = inThreads(threads, func(t int) error {
		if !load {
			return nil
		}
		key := make([]byte, 0, 32)
		// With batches: values are slices of the stream's pool; keys are copied (the buffer is
		// reused).
		var keys, values [][]byte
		err := st.forEach(false, t, threads, func(_ byte, _ int, value []byte, k uint64) error {
			key = formatKey(key, k)
			loaded[t] += uint64(len(key) + len(value))
			if s.loadBatch <= 1 {
				return e.update(key, value)
			}
			keys, values = append(keys, append([]byte(nil), key...)), append(values, value)
			if len(keys) < s.loadBatch {
				return nil
			}
			err := e.insertBatch(keys, values)
			keys, values = keys[:0], values[:0]
			return err
		})
		if err != nil || len(keys) == 0 {
			return err
		}
		return e.insertBatch(keys, values)
	})
	if err != nil {
		return err
	}
	loadSecs := time.Since(t0).Seconds()

	e.setSync(s.durability == "groupsync")
	type tstats struct {
		h                                            *hist
		reads, found, scans, scanKeys, writes, bytes uint64
	}
	per := make([]tstats, threads)
	cpu0, err := cpuSeconds()
	if err != nil {
		return err
	}
	t1 := time.Now()
	err = inThreads(threads, func(t int) error {
		ts := &per[t]
		ts.h = newHist()
		if !runPhase {
			return nil
		}
		key := make([]byte, 0, 32)
		return st.forEach(true, t, threads, func(kind byte, scanLen int, value []byte, k uint64) error {
			key = formatKey(key, k)
			start := time.Now()
			switch kind {
			case opRead:
				ts.reads++
				found, err := e.read(key)
				if err != nil {
					return err
				}
				if found {
					ts.found++
				}
			case opUpdate, opInsert:
				if err := e.update(key, value); err != nil {
					return err
				}
			case opScan:
				ts.scans++
				n, err := e.scan(key, scanLen)
				if err != nil {
					return err
				}
				ts.scanKeys += uint64(n)
			case opRMW:
				ts.reads++
				found, err := rmw(e, key, value)
				if err != nil {
					return err
				}
				if found {
					ts.found++
				}
			}
			ns := uint64(time.Since(start).Nanoseconds())
			if ns == 0 {
				ns = 1
			}
			ts.h.record(ns)
			if kind == opInsert || kind == opUpdate || kind == opRMW {
				ts.writes++
				ts.bytes += uint64(len(key) + len(value))
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	runSecs := time.Since(t1).Seconds()
	cpu1, err := cpuSeconds()
	if err != nil {
		return err
	}
	name, sets := e.name(), e.settings()
	if err := e.flushAndClose(); err != nil {
		return err
	}
	ops := st.ops
	if !runPhase {
		ops = 0
	}
	if !load {
		loadSecs = 0
	}
	r := result{
		Engine:         name,
		Settings:       sets,
		Workload:       st.workload,
		Records:        st.records,
		Ops:            ops,
		Threads:        uint64(threads),
		ValueSize:      uint64(st.valueSize),
		LoadSecs:       loadSecs,
		RunSecs:        runSecs,
		CPUSecs:        cpu1 - cpu0,
		CPUUsPerOp:     (cpu1 - cpu0) * 1e6 / math.Max(1, float64(ops)),
		DiskWriteBytes: diskWriteBytes() - io0,
		SpaceBytes:     diskUsage(dbDir),
		PeakRSSBytes:   peakRSSBytes(),
	}
	if load {
		r.LoadOpsPerSec = float64(st.records) / loadSecs
	}
	if runPhase {
		r.OpsPerSec = float64(ops) / runSecs
	}
	h := newHist()
	for t := range per {
		r.UserBytes += loaded[t] + per[t].bytes
		h.add(per[t].h)
		r.Reads += per[t].reads
		r.ReadsFound += per[t].found
		r.Scans += per[t].scans
		r.ScanKeys += per[t].scanKeys
		r.Writes += per[t].writes
	}
	if h.n > 0 {
		r.MeanUs = h.sum / float64(h.n) / 1e3
	}
	r.P50Us = float64(h.quantile(0.5)) / 1e3
	r.P99Us = float64(h.quantile(0.99)) / 1e3
	r.P999Us = float64(h.quantile(0.999)) / 1e3
	r.WriteAmp = float64(r.DiskWriteBytes) / math.Max(1, float64(r.UserBytes))
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}
