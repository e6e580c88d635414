package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/deepgo-ml/deepgo/csrc"
)

// blasReport prints the BLAS the nn products run on, the core it uses and
// why, and (n > 0) the single-threaded sgemm rate: the median of 5 timed
// rounds of an n×n×n product.
func blasReport(w io.Writer, n int) error {
	b := csrc.BLAS()
	if b.Error != "" {
		return fmt.Errorf("BLAS: %s", b.Error)
	}
	fmt.Fprintf(w, "BLAS: %s\n", b.Library)
	if b.Library != "OpenBLAS" {
		fmt.Fprintf(w, "(OpenBLAS is linked but not running the products: %s)\n", csrc.BLASEnv)
	}
	fmt.Fprintf(w, "OpenBLAS: %s\n", b.Config)
	fmt.Fprintf(w, "OpenBLAS core: %s (library chose %q, CPU supports %q: %s)\n", b.Core, b.LibraryCore, b.CPUCore, b.Reason)
	fmt.Fprintf(w, "Linear layer's products: %s\n", b.Linear)
	if n <= 0 {
		return nil
	}
	reps := max(1, int(1e10/(2*float64(n)*float64(n)*float64(n))))
	rates := make([]float64, 5)
	for i := range rates {
		s, err := csrc.SGEMMSeconds(n, reps)
		if err != nil {
			return fmt.Errorf("sgemm %d: %w", n, err)
		}
		rates[i] = 2 * float64(n) * float64(n) * float64(n) * float64(reps) / s / 1e9
	}
	sort.Float64s(rates)
	fmt.Fprintf(w, "sgemm %d³, 1 thread: %.1f GFLOP/s (median of %d rounds of %d)\n", n, rates[len(rates)/2], len(rates), reps)
	return nil
}
