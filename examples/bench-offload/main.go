// Command bench-offload measures what NVMe optimizer offload
// (zero_optimization.offload_optimizer.device "nvme") costs a training
// step: the same fp32 MLP (internal/testmodel) trained with AdamW on the
// CPU backend with its optimizer state in memory and swapped through
// -dir, interleaved round by round so a drift of the machine hits both
// alike, step time the median over every timed step. For the NVMe run it
// reports the swap bytes read and written per step, the wall time the
// swap I/O was in flight (io_ms), the part of it the step waited on it
// (wait_ms), and the share hidden behind compute, 1 - wait/io (target >=
// 0.7; the optimizer step itself hides little when the disk is slower
// than Adam on the CPU, and what runs under forward and backward is
// bounded by the swap buffers, so swap_buffers_of_state is reported
// too). The disk's limit is measured in the same run: the aio engine
// (same settings as the swapper) writing and reading a file of the state's
// size in -dir, one request each.
//
//	go run ./examples/bench-offload [-dir /path/on/nvme] [-hidden 1024] [-layers 8] [-micro 32]
//	    [-rounds 5] [-steps 4] [-sub-group-size 1000000] [-buffer-count 4]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"

	"github.com/deepgo-ml/deepgo/internal/benchutil"
)

type options struct {
	dir                   string
	hidden, layers, micro int
	rounds, steps         int
	subGroup, buffers     int
}

// offloadRow is the NVMe run's swap I/O per timed step.
type offloadRow struct {
	StepMS      float64   `json:"step_ms"`
	OptimizerMS float64   `json:"optimizer_ms"`
	ReadMB      float64   `json:"swap_read_MB_per_step"`
	WriteMB     float64   `json:"swap_write_MB_per_step"`
	IOMS        float64   `json:"io_ms_per_step"`
	WaitMS      float64   `json:"wait_ms_per_step"`
	Hidden      float64   `json:"io_hidden_share"`
	IOFloorMS   float64   `json:"io_floor_ms_per_step"`
	SwapBuffers int64     `json:"swap_buffer_bytes"`
	BufferShare float64   `json:"swap_buffers_of_state"`
	StateOnDisk int64     `json:"state_bytes_on_disk"`
	StepAllMS   []float64 `json:"step_ms_all"`
}

type memoryRow struct {
	StepMS      float64   `json:"step_ms"`
	OptimizerMS float64   `json:"optimizer_ms"`
	StateBytes  int64     `json:"state_bytes_in_memory"`
	StepAllMS   []float64 `json:"step_ms_all"`
}

type diskRow struct {
	File      string  `json:"file"`
	Bytes     int64   `json:"bytes"`
	Backend   string  `json:"aio_backend"`
	WriteGBps float64 `json:"write_GB_s"`
	ReadGBps  float64 `json:"read_GB_s"`
}

type report struct {
	Machine      benchutil.Machine `json:"machine"`
	Params       int64             `json:"params"`
	Hidden       int               `json:"hidden"`
	Layers       int               `json:"layers"`
	Micro        int               `json:"micro_batch"`
	Rounds       int               `json:"rounds"`
	Steps        int               `json:"timed_steps_per_round"`
	SubGroupSize int               `json:"sub_group_size"`
	BufferCount  int               `json:"buffer_count"`
	GOMAXPROCS   int               `json:"gomaxprocs"`
	Memory       memoryRow         `json:"in_memory"`
	NVMe         offloadRow        `json:"nvme"`
	Slowdown     float64           `json:"nvme_over_memory"`
	Disk         diskRow           `json:"disk"`
	Target       string            `json:"target"`
	Note         string            `json:"note"`
}

func main() {
	if err := execute(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-offload:", err)
		os.Exit(1)
	}
}

func parse(args []string) (options, error) {
	fs := flag.NewFlagSet("bench-offload", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o options
	fs.StringVar(&o.dir, "dir", os.TempDir(), "nvme_path: a directory on the disk to measure (O_DIRECT; not tmpfs)")
	fs.IntVar(&o.hidden, "hidden", 1024, "hidden width")
	fs.IntVar(&o.layers, "layers", 8, "linear layers (hidden x hidden each)")
	fs.IntVar(&o.micro, "micro", 32, "micro-batch rows")
	fs.IntVar(&o.rounds, "rounds", 5, "interleaved rounds")
	fs.IntVar(&o.steps, "steps", 4, "timed steps per round and contender")
	fs.IntVar(&o.subGroup, "sub-group-size", 1_000_000, "zero_optimization.sub_group_size")
	fs.IntVar(&o.buffers, "buffer-count", 4, "offload_optimizer.buffer_count")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"hidden", o.hidden}, {"layers", o.layers}, {"micro", o.micro}, {"rounds", o.rounds}, {"steps", o.steps},
		{"sub-group-size", o.subGroup}, {"buffer-count", o.buffers}} {
		if c.v < 1 {
			return o, fmt.Errorf("-%s %d: want >= 1", c.name, c.v)
		}
	}
	if st, err := os.Stat(o.dir); err != nil || !st.IsDir() {
		return o, fmt.Errorf("-dir %q: not a directory", o.dir)
	}
	return o, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func execute(args []string, out io.Writer) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(o.dir, "bench-offload-")
	if err != nil {
		return fmt.Errorf("-dir %q: %w", o.dir, err)
	}
	defer os.RemoveAll(dir)
	r := report{Machine: benchutil.ThisMachine(), Hidden: o.hidden, Layers: o.layers, Micro: o.micro, Rounds: o.rounds,
		Steps: o.steps, SubGroupSize: o.subGroup, BufferCount: o.buffers, GOMAXPROCS: runtime.GOMAXPROCS(0),
		Target: "nvme.io_hidden_share >= 0.7",
		Note: "io_ms is the wall time with swap I/O in flight, wait_ms the part the step blocked on it; " +
			"io_floor_ms is the step's swap bytes at the disk's measured read and write rates"}
	r.Params = int64(o.layers) * int64(o.hidden) * int64(o.hidden+1)
	mem, err := newContender(o, "")
	if err != nil {
		return err
	}
	defer mem.close()
	nv, err := newContender(o, dir)
	if err != nil {
		return err
	}
	defer nv.close()
	order := []*contender{mem, nv}
	for round := range o.rounds {
		for _, c := range order {
			if err := c.run(o.steps, round == 0); err != nil {
				return err
			}
		}
		slices.Reverse(order)
	}
	if r.Disk, err = measureDisk(dir, nv.stateBytes()); err != nil {
		return err
	}
	r.Memory = mem.memoryRow()
	r.NVMe = nv.offloadRow(r.Disk)
	r.Slowdown = r.NVMe.StepMS / r.Memory.StepMS
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
