package main

import "testing"

func TestHistBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 2047, 2048, 2049, 4095, 4096, 123456, 1 << 40, 1<<63 + 5} {
		i := bucketOf(v)
		hi := bucketHigh(i)
		if hi < v {
			t.Fatalf("value %d: bucket %d high %d below it", v, i, hi)
		}
		// 11 bits of precision: the bucket is within 1/1024 of the value.
		if float64(hi-v) > float64(v)/1024+1 {
			t.Fatalf("value %d: bucket high %d too far", v, hi)
		}
		if i >= len(newHist().counts) {
			t.Fatalf("value %d: bucket %d out of range", v, i)
		}
	}
	h := newHist()
	for v := uint64(1); v <= 1000; v++ {
		h.record(v * 1000)
	}
	if q := h.quantile(0.5); q < 500000 || q > 501000 {
		t.Fatalf("p50 %d", q)
	}
	if q := h.quantile(0.99); q < 990000 || q > 991000 {
		t.Fatalf("p99 %d", q)
	}
}

func TestFormatKey(t *testing.T) {
	if got := string(formatKey(nil, 6284781860667377211)); got != "user6284781860667377211" {
		t.Fatal(got)
	}
}
