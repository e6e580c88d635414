// Command bench-aio measures the asynchronous I/O engine (package aio)
// reading and writing one file with O_DIRECT, for each block size and queue
// depth asked, on both back ends (io_uring and the pread/pwrite threads),
// next to fio on the same file in the same run (--ioengine=io_uring
// --direct=1, same --bs and --iodepth), and prints one JSON object.
//
// Each measurement moves the whole file in one request, split by the engine
// into block-size pieces kept queue-depth deep, as DeepSpeed's aio bench
// does. Rounds interleave the contenders (ours on io_uring, ours on threads,
// fio) so a drift of the disk hits all alike; the figure is the median of
// -reps rounds. The data is random. Without fio (not on PATH, or -fio "")
// the report says so and the engine runs alone; scripts/install-peers.sh
// installs fio.
//
//	go run ./examples/bench-aio [-dir /path/on/nvme] [-size-mib 1024] [-blocks-mib 1,8,64] [-depths 8,16,32] [-reps 3] [-threads 1] [-fio fio]
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/deepgo-ml/deepgo/internal/benchutil"
)

type options struct {
	dir     string
	sizeMiB int
	blocks  []int
	depths  []int
	reps    int
	threads int
	fio     string
}

// row is one operation at one block size and queue depth.
type row struct {
	Op          string    `json:"op"`
	BlockMiB    int       `json:"block_mib"`
	QueueDepth  int       `json:"queue_depth"`
	URingGBps   float64   `json:"io_uring_GB_s"`
	ThreadsGBps float64   `json:"threads_GB_s"`
	FioGBps     float64   `json:"fio_GB_s,omitempty"`
	URingOfFio  float64   `json:"io_uring_of_fio,omitempty"`
	ThreadsOf   float64   `json:"threads_of_fio,omitempty"`
	URingAll    []float64 `json:"io_uring_rounds_GB_s"`
	ThreadsAll  []float64 `json:"threads_rounds_GB_s"`
	FioAll      []float64 `json:"fio_rounds_GB_s,omitempty"`
}

type report struct {
	Machine      benchutil.Machine `json:"machine"`
	File         string            `json:"file"`
	FileBytes    int64             `json:"file_bytes"`
	Reps         int               `json:"reps"`
	Threads      int               `json:"intra_op_parallelism"`
	URingBackend string            `json:"io_uring_backend"`
	Fio          string            `json:"fio"`
	FioCommand   string            `json:"fio_command_first,omitempty"`
	Target       string            `json:"target"`
	Rows         []row             `json:"results"`
	MinURingOf   float64           `json:"min_io_uring_of_fio,omitempty"`
}

func main() {
	if err := execute(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-aio:", err)
		os.Exit(1)
	}
}

func intList(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("-%s %q: want a comma-separated list of positive integers", name, s)
		}
		out = append(out, v)
	}
	return out, nil
}

func parse(args []string) (options, error) {
	fs := flag.NewFlagSet("bench-aio", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o options
	var blocks, depths string
	fs.StringVar(&o.dir, "dir", os.TempDir(), "directory for the test file: on the disk to measure (O_DIRECT; not tmpfs)")
	fs.IntVar(&o.sizeMiB, "size-mib", 1024, "file size in MiB")
	fs.StringVar(&blocks, "blocks-mib", "1,8,64", "block sizes in MiB")
	fs.StringVar(&depths, "depths", "8,16,32", "queue depths")
	fs.IntVar(&o.reps, "reps", 3, "rounds; the median is reported")
	fs.IntVar(&o.threads, "threads", 1, "engine workers (aio.intra_op_parallelism)")
	fs.StringVar(&o.fio, "fio", "fio", `fio binary; "" runs the engine alone`)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.blocks, err = intList("blocks-mib", blocks); err != nil {
		return o, err
	}
	if o.depths, err = intList("depths", depths); err != nil {
		return o, err
	}
	switch {
	case o.sizeMiB < 1:
		return o, fmt.Errorf("-size-mib %d: want >= 1", o.sizeMiB)
	case o.reps < 1:
		return o, fmt.Errorf("-reps %d: want >= 1", o.reps)
	case o.threads < 1 || o.threads > 256:
		return o, fmt.Errorf("-threads %d: want 1..256", o.threads)
	}
	for _, b := range o.blocks {
		if b > 1024 {
			return o, fmt.Errorf("-blocks-mib %d: want at most 1024 (the engine's largest piece)", b)
		}
	}
	if st, err := os.Stat(o.dir); err != nil || !st.IsDir() {
		return o, fmt.Errorf("-dir %q: not a directory", o.dir)
	}
	return o, nil
}

func execute(args []string, out io.Writer) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(o.dir, "bench-aio-")
	if err != nil {
		return fmt.Errorf("-dir %q: %w", o.dir, err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "data")
	size := int64(o.sizeMiB) << 20
	r := report{Machine: benchutil.ThisMachine(), File: path, FileBytes: size, Reps: o.reps, Threads: o.threads,
		Target: ">= 0.9 of fio (io_uring back end)"}
	f, err := newFio(o.fio)
	if err != nil {
		r.Fio = "not run: " + err.Error()
	} else if f != nil {
		r.Fio = f.version
	}
	var ours *engines
	if ours, err = openEngines(path, size); err != nil {
		return err
	}
	defer ours.close()
	r.URingBackend = ours.uringBackend
	for _, op := range []string{"write", "read"} {
		for _, b := range o.blocks {
			for _, qd := range o.depths {
				row, err := measure(ours, f, o, op, b, qd, path, size)
				if err != nil {
					return err
				}
				r.Rows = append(r.Rows, row)
				if f != nil && r.FioCommand == "" {
					r.FioCommand = f.command(path, op, b, qd, size)
				}
			}
		}
	}
	for _, row := range r.Rows {
		if row.URingOfFio > 0 && (r.MinURingOf == 0 || row.URingOfFio < r.MinURingOf) {
			r.MinURingOf = row.URingOfFio
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

var errNoFio = errors.New("fio not found on PATH (scripts/install-peers.sh installs it)")
