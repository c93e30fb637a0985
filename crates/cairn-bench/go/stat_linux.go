package main

import (
	"os"
	"syscall"
)

type statInfo struct{ dev, ino, blocks uint64 }

// sysStat returns a file's device, inode and allocated 512-byte blocks (as du counts them).
func sysStat(info os.FileInfo) (statInfo, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return statInfo{}, false
	}
	return statInfo{dev: uint64(st.Dev), ino: st.Ino, blocks: uint64(st.Blocks)}, true
}
