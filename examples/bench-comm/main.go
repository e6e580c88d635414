// Command bench-comm measures deepgo's collectives the way nccl-tests does
// and prints one JSON object.
//
//	go run ./examples/bench-comm                 # local backend, 2 and 4 ranks
//	go run -tags mpi ./examples/bench-comm       # also Open MPI, 2 processes (spawns mpirun)
//	go run -tags gloo,mpi ./examples/bench-comm -procs 2
//	                                             # all-reduce only, 1 KiB..64 MiB: Gloo
//	                                             # between 2 processes of this binary, Open
//	                                             # MPI's 2 (mpirun), local's 2 in-process ranks
//
// -procs N re-executes this binary as N processes (RANK, WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, MASTER_PORT as torchrun sets them) that meet at a
// store on loopback and measure comm/gloo; it also sets the defaults of
// -min, -max, -ops, -ranks and -mpi-np to 1 KiB, 64 MiB, all_reduce, N and
// N, so that the three backends run the same sizes in the same run. A build
// without Gloo (or MPI) says so in gloo_note (mpi_note) and runs the rest.
//
// Sizes run from -min to -max bytes (x4 steps). "bytes" is the total
// buffer: the all-reduce buffer, the reduce-scatter input, the all-gather
// output (as nccl-tests counts). algbw = bytes/time; busbw = algbw x
// 2(n-1)/n for all-reduce and (n-1)/n for reduce-scatter and all-gather,
// the traffic each rank must move whatever the algorithm, comparable to a
// memory-copy bandwidth. Buffers are allocated and warmed (one untimed
// iteration, plus -warmup more) before timing.
//
// JSON fields:
//
//	machine        cpus, GOMAXPROCS, the C core's instruction set
//	memcpy         one thread copying -max bytes between warm C buffers:
//	               gbps (= bytes/time, 1e9 B/s), best of several; gbps_2threads
//	               is two goroutines copying halves (context only)
//	compute_probe  dg_reduce_into sum of 2 float32 inputs of -max/4 bytes each
//	               into a third, with a 1- and a 2-thread C pool: gbps counts
//	               the bytes read and written; speedup = 2-thread / 1-thread
//	local, mpi,    rows {op, ranks, bytes, iters, time_us (per op: the median
//	gloo           over -rounds rounds of the round's mean), algbw_gbps,
//	               busbw_gbps, busbw_over_memcpy}
//	summary        per backend and rank count: the minimum all-reduce
//	               busbw/memcpy ratio at >= 64 MiB, and local vs mpi all-reduce
//	               busbw at each size >= 64 MiB with 2 ranks
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Row is one measurement.
type Row struct {
	Op       string  `json:"op"`
	Ranks    int     `json:"ranks"`
	Bytes    int     `json:"bytes"`
	Iters    int     `json:"iters"`
	TimeUS   float64 `json:"time_us"`
	AlgBW    float64 `json:"algbw_gbps"`
	BusBW    float64 `json:"busbw_gbps"`
	OverCopy float64 `json:"busbw_over_memcpy,omitempty"`
}

var (
	minBytes  = flag.Int("min", 1<<20, "smallest size in bytes")
	maxBytes  = flag.Int("max", 256<<20, "largest size in bytes")
	rankList  = flag.String("ranks", "2,4", "local world sizes")
	minTime   = flag.Duration("mintime", 300*time.Millisecond, "time each size at least this long")
	warmup    = flag.Int("warmup", 1, "untimed iterations after the first")
	mpiChild  = flag.Bool("mpi-child", false, "internal: run the MPI sweep (under mpirun) and print its rows")
	opList    = flag.String("ops", "all_reduce,reduce_scatter,all_gather", "operations to measure")
	rounds    = flag.Int("rounds", 5, "timed rounds per size; time_us is their median")
	procs     = flag.Int("procs", 0, "also measure comm/gloo between this many processes of this binary (0: none)")
	glooChild = flag.Bool("gloo-child", false, "internal: run the Gloo sweep as the rank the environment names")
	//lint:ignore U1000 read by mpi.go (build tag mpi)
	mpiNP = flag.Int("mpi-np", 2, "processes for the MPI sweep")
)

var ops []string

func busFactor(op string, n int) float64 {
	if op == "all_reduce" {
		return 2 * float64(n-1) / float64(n)
	}
	return float64(n-1) / float64(n)
}

func sizes() []int {
	var s []int
	for b := *minBytes; b <= *maxBytes; b *= 4 {
		s = append(s, b)
	}
	return s
}

// buffers allocates one rank's buffers for op at total size bytes (float32).
func buffers(op string, n, bytes int) (in, out *tensor.Tensor, err error) {
	elems := bytes / 4 / n * n // divisible by n
	switch op {
	case "all_reduce":
		in, err = tensor.Empty(tensor.Float32, elems)
		return in, in, err
	case "reduce_scatter":
		if in, err = tensor.Empty(tensor.Float32, elems); err != nil {
			return nil, nil, err
		}
		out, err = tensor.Empty(tensor.Float32, elems/n)
		return in, out, err
	default: // all_gather
		if out, err = tensor.Empty(tensor.Float32, elems); err != nil {
			return nil, nil, err
		}
		in, err = tensor.Empty(tensor.Float32, elems/n)
		return in, out, err
	}
}

// fill writes pseudo-random values, different per rank. Not a short
// repeating pattern: pages with equal contents can be merged by the host,
// and then reads hit a few cached pages and report bandwidth the memory
// never gave.
func fill(t *tensor.Tensor, r int) {
	s, _ := t.Float32s()
	g := rand.New(rand.NewPCG(uint64(r), uint64(len(s))))
	for i := range s {
		s[i] = 2*g.Float32() - 1
	}
}

func call(ctx context.Context, c comm.Comm, op string, in, out *tensor.Tensor) error {
	switch op {
	case "all_reduce":
		return c.AllReduce(ctx, in, comm.Sum)
	case "reduce_scatter":
		return c.ReduceScatter(ctx, out, in, comm.Sum)
	}
	return c.AllGather(ctx, out, in)
}

// sweep measures every op and size on this rank's comm; rank 0's rows are
// returned (the others return nil).
func sweep(ctx context.Context, c comm.Comm) ([]Row, error) {
	var rows []Row
	n := c.Size()
	for _, op := range ops {
		for _, bytes := range sizes() {
			in, out, err := buffers(op, n, bytes)
			if err != nil {
				return nil, err
			}
			fill(in, c.Rank())
			// Warm: first touch and caches, then calibrate the count.
			for range 1 + *warmup {
				if err := call(ctx, c, op, in, out); err != nil {
					return nil, err
				}
			}
			if err := c.Barrier(ctx); err != nil {
				return nil, err
			}
			t0 := time.Now()
			if err := call(ctx, c, op, in, out); err != nil {
				return nil, err
			}
			iters := int(*minTime / max(time.Since(t0), time.Microsecond))
			// Everyone uses rank 0's count.
			cnt, _ := tensor.Empty(tensor.Int64, 1)
			cs, _ := cnt.Int64s()
			cs[0] = int64(min(max(iters, 3), 1000))
			if err := c.Broadcast(ctx, cnt, 0); err != nil {
				return nil, err
			}
			iters = int(cs[0])
			cnt.Free()
			perRound := max(iters / *rounds, 1)
			times := make([]float64, *rounds)
			for k := range times {
				if err := c.Barrier(ctx); err != nil {
					return nil, err
				}
				start := time.Now()
				for range perRound {
					if err := call(ctx, c, op, in, out); err != nil {
						return nil, err
					}
				}
				if err := c.Barrier(ctx); err != nil {
					return nil, err
				}
				times[k] = time.Since(start).Seconds() / float64(perRound)
			}
			slices.Sort(times)
			in.Free()
			if out != in {
				out.Free()
			}
			total := (bytes / 4 / n * n) * 4
			per := times[len(times)/2]
			alg := float64(total) / per / 1e9
			rows = append(rows, Row{Op: op, Ranks: n, Bytes: total, Iters: perRound * *rounds, TimeUS: per * 1e6,
				AlgBW: alg, BusBW: alg * busFactor(op, n)})
		}
	}
	if c.Rank() != 0 {
		return nil, nil
	}
	return rows, nil
}

func localSweep(n int) ([]Row, error) {
	var rows []Row
	var mu sync.Mutex
	err := local.Run(context.Background(), n, local.Options{Timeout: 5 * time.Minute}, func(ctx context.Context, c comm.Comm) error {
		r, err := sweep(ctx, c)
		mu.Lock()
		rows = append(rows, r...)
		mu.Unlock()
		return err
	})
	return rows, err
}

// memcpyGBps copies bytes between two warm C buffers with the given number
// of goroutines (each its half), best of 5.
func memcpyGBps(bytes, threads int) (float64, error) {
	a, err := tensor.Empty(tensor.Uint8, bytes)
	if err != nil {
		return 0, err
	}
	defer a.Free()
	b, err := tensor.Empty(tensor.Uint8, bytes)
	if err != nil {
		return 0, err
	}
	defer b.Free()
	src := unsafe.Slice((*byte)(a.Ptr()), bytes)
	dst := unsafe.Slice((*byte)(b.Ptr()), bytes)
	g := rand.New(rand.NewPCG(1, 2)) // random bytes: see fill
	for i := range src {
		src[i] = byte(g.Uint32())
	}
	copy(dst, src)
	best := time.Duration(1 << 62)
	for range 5 {
		var wg sync.WaitGroup
		t0 := time.Now()
		part := bytes / threads
		for k := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lo, hi := k*part, (k+1)*part
				if k == threads-1 {
					hi = bytes
				}
				copy(dst[lo:hi], src[lo:hi])
			}()
		}
		wg.Wait()
		best = min(best, time.Since(t0))
	}
	return float64(bytes) / best.Seconds() / 1e9, nil
}

// computeProbe times the C core's reduce (sum of two inputs) with 1 and 2
// pool threads.
func computeProbe(bytes int) (map[string]any, error) {
	n := bytes / 4
	var ts [3]*tensor.Tensor
	for i := range ts {
		t, err := tensor.Empty(tensor.Float32, n)
		if err != nil {
			return nil, err
		}
		defer t.Free()
		fill(t, i)
		ts[i] = t
	}
	res := map[string]any{"kernel": fmt.Sprintf("dg_reduce_into sum, 2 x float32[%d] -> float32[%d]", n, n)}
	var gb [3]float64
	for _, threads := range []int{1, 2} {
		cpu, err := backend.NewCPU(threads)
		if err != nil {
			return nil, err
		}
		best := time.Duration(1 << 62)
		for range 5 {
			t0 := time.Now()
			if err := cpu.Reduce(backend.Sum, ts[2], ts[:2]); err != nil {
				return nil, err
			}
			best = min(best, time.Since(t0))
		}
		cpu.Close()
		gb[threads] = 3 * float64(bytes) / best.Seconds() / 1e9
		res[fmt.Sprintf("threads%d_gbps", threads)] = gb[threads]
	}
	res["speedup"] = gb[2] / gb[1]
	return res, nil
}

func main() {
	flag.Parse()
	if err := setDefaults(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-comm:", err)
		os.Exit(2)
	}
	if *mpiChild {
		runMPIChild()
		return
	}
	if *glooChild {
		runGlooChild()
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-comm:", err)
		os.Exit(1)
	}
}

func run() error {
	out := map[string]any{}
	cpu, err := backend.NewCPU(0)
	if err != nil {
		return err
	}
	out["machine"] = map[string]any{"cpus": runtime.NumCPU(), "gomaxprocs": runtime.GOMAXPROCS(0), "isa": cpu.ISA().String()}
	cpu.Close()
	m1, err := memcpyGBps(*maxBytes, 1)
	if err != nil {
		return err
	}
	m2, err := memcpyGBps(*maxBytes, 2)
	if err != nil {
		return err
	}
	out["memcpy"] = map[string]any{"bytes": *maxBytes, "gbps": m1, "gbps_2threads": m2,
		"method": "Go copy (memmove) between two warm C buffers, best of 5"}
	probe, err := computeProbe(*maxBytes / 4)
	if err != nil {
		return err
	}
	out["compute_probe"] = probe

	var localRows []Row
	for _, s := range strings.Split(*rankList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-ranks %q: %w", *rankList, err)
		}
		rows, err := localSweep(n)
		if err != nil {
			return err
		}
		localRows = append(localRows, rows...)
	}
	for i := range localRows {
		localRows[i].OverCopy = localRows[i].BusBW / m1
	}
	out["local"] = localRows

	mpiRows, note := mpiSweep()
	for i := range mpiRows {
		mpiRows[i].OverCopy = mpiRows[i].BusBW / m1
	}
	out["mpi"] = mpiRows
	if note != "" {
		out["mpi_note"] = note
	}
	if *procs > 0 {
		glooRows, note := glooSweep(*procs)
		for i := range glooRows {
			glooRows[i].OverCopy = glooRows[i].BusBW / m1
		}
		out["gloo"] = glooRows
		out["gloo_note"] = note
		out["allreduce_by_size"] = bySize(map[string][]Row{"local": localRows, "mpi": mpiRows, "gloo": glooRows}, *procs)
	}
	out["summary"] = summarize(localRows, mpiRows)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func summarize(localRows, mpiRows []Row) map[string]any {
	s := map[string]any{}
	minRatio := func(rows []Row, prefix string) {
		for _, r := range rows {
			if r.Op != "all_reduce" || r.Bytes < 64<<20 {
				continue
			}
			k := fmt.Sprintf("%s_allreduce_%dranks_min_busbw_over_memcpy_ge64MiB", prefix, r.Ranks)
			if v, ok := s[k].(float64); !ok || r.OverCopy < v {
				s[k] = r.OverCopy
			}
		}
	}
	minRatio(localRows, "local")
	minRatio(mpiRows, "mpi")
	var vs []map[string]any
	for _, l := range localRows {
		for _, m := range mpiRows {
			if l.Op == "all_reduce" && m.Op == l.Op && l.Ranks == m.Ranks && l.Bytes == m.Bytes && l.Bytes >= 64<<20 {
				vs = append(vs, map[string]any{"ranks": l.Ranks, "bytes": l.Bytes, "local_busbw_gbps": l.BusBW,
					"mpi_busbw_gbps": m.BusBW, "local_over_mpi": l.BusBW / m.BusBW})
			}
		}
	}
	if vs != nil {
		s["allreduce_local_vs_mpi_ge64MiB"] = vs
	}
	return s
}
