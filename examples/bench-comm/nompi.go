//go:build !mpi

package main

import (
	"fmt"
	"os"
)

func mpiSweep() ([]Row, string) {
	return nil, "built without -tags mpi: no Open MPI measurement"
}

func runMPIChild() {
	fmt.Fprintln(os.Stderr, "bench-comm: -mpi-child needs a build with -tags mpi")
	os.Exit(2)
}
