// Package testmem measures what a piece of code allocates, for the tests
// that hold a bound with memory measured. The counter it reads is the
// process's, so other goroutines' allocations count too: Allocated takes
// the least of three runs, which a background allocation rarely spoils
// three times over. For tests only.
package testmem

import (
	"math"
	"runtime"
)

// Allocated reports the bytes f allocates, the least of three runs.
func Allocated(f func()) uint64 {
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}
