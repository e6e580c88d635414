//go:build mpi

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/deepgo-ml/deepgo/comm/mpi"
)

// mpiSweep runs this binary under mpirun with -mpi-child and reads rank
// 0's rows from its stdout.
func mpiSweep() ([]Row, string) {
	self, err := os.Executable()
	if err != nil {
		return nil, err.Error()
	}
	args := []string{"--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(*mpiNP), self, "-mpi-child",
		"-min", strconv.Itoa(*minBytes), "-max", strconv.Itoa(*maxBytes), "-mintime", minTime.String(), "-warmup", strconv.Itoa(*warmup),
		"-ops", *opList, "-rounds", strconv.Itoa(*rounds)}
	cmd := exec.Command("mpirun", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Sprintf("mpirun %v: %v", args, err)
	}
	var rows []Row
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		return nil, fmt.Sprintf("reading the MPI rows: %v", err)
	}
	return rows, fmt.Sprintf("Open MPI via comm/mpi, %d processes, 1 C thread each", *mpiNP)
}

func runMPIChild() {
	c, err := mpi.World(mpi.Options{Timeout: 5 * time.Minute, Threads: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rows, err := sweep(context.Background(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		mpi.Abort(1)
	}
	if c.Rank() == 0 {
		json.NewEncoder(os.Stdout).Encode(rows)
	}
	mpi.Finalize()
}
