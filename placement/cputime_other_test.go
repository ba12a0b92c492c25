//go:build !linux

package placement_test

// threadCPU is unavailable here: the cpu columns read 0.
func threadCPU() int64 { return 0 }
