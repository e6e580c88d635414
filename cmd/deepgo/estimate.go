package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/deepgo-ml/deepgo/offload"
	"github.com/deepgo-ml/deepgo/zero"
)

func init() {
	register(command{name: "estimate", help: "ZeRO model-state memory per rank (DeepSpeed's estimates and deepgo's own)", run: runEstimate})
}

const estimateUsage = `usage:
  deepgo estimate --params N --world W [--stage S] [--offload none|cpu|nvme]
                  [--sub-group-size N] [--buffer-count B]
                  [--pipeline-read] [--pipeline-write]
                  [--gpus-per-node G] [--largest-layer L] [--buffer-factor F]
      prints what DeepSpeed's estimate_zero2_model_states_mem_needs (stages
      1-2) or estimate_zero3_model_states_mem_needs (stage 3) print for the
      same inputs, then what deepgo allocates per rank for fp16 + Adam, and
      where (host, device and swap-file bytes) with the given optimizer
      offload on a device backend
`

// runEstimate implements "deepgo estimate".
func runEstimate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, estimateUsage) }
	params := fs.Float64("params", 0, "total model parameters (e.g. 1.3e9)")
	world := fs.Int("world", 0, "data-parallel ranks (GPUs) in total")
	stage := fs.Int("stage", 3, "ZeRO stage (0-3)")
	where := fs.String("offload", "none", "optimizer offload device: none, cpu or nvme")
	subGroup := fs.Int("sub-group-size", 1e9, "zero_optimization.sub_group_size (nvme: the swap buffers' size)")
	buffers := fs.Int("buffer-count", 4, "offload_optimizer.buffer_count (nvme)")
	pipeRead := fs.Bool("pipeline-read", false, "offload_optimizer.pipeline_read (nvme: reading ahead takes a second swap buffer)")
	pipeWrite := fs.Bool("pipeline-write", false, "offload_optimizer.pipeline_write (nvme: writes running on hold their buffers)")
	gpn := fs.Int("gpus-per-node", 0, "ranks per node (default: --world, one node)")
	largest := fs.Float64("largest-layer", 0, "parameters of the largest module (stage 3; default params/10)")
	factor := fs.Float64("buffer-factor", 1.5, "DeepSpeed's additional_buffer_factor")
	if err := fs.Parse(args); err != nil {
		return flagExit(err)
	}
	switch {
	case *params < 1:
		fmt.Fprintln(stderr, "deepgo estimate: --params: required, >= 1")
		return 2
	case *world < 1:
		fmt.Fprintln(stderr, "deepgo estimate: --world: required, >= 1")
		return 2
	case *stage < 0 || *stage > 3:
		fmt.Fprintf(stderr, "deepgo estimate: --stage %d: allowed 0, 1, 2, 3\n", *stage)
		return 2
	case *where != "none" && *where != "cpu" && *where != "nvme":
		fmt.Fprintf(stderr, "deepgo estimate: --offload %q: allowed none, cpu, nvme\n", *where)
		return 2
	case *subGroup < 1:
		fmt.Fprintf(stderr, "deepgo estimate: --sub-group-size %d: want >= 1\n", *subGroup)
		return 2
	case *buffers < 1:
		fmt.Fprintf(stderr, "deepgo estimate: --buffer-count %d: want >= 1\n", *buffers)
		return 2
	case *stage == 0 && *where != "none":
		// the config reader warns and trains without offload: an estimate
		// of the offloaded layout would describe a run that does not happen
		fmt.Fprintf(stderr, "deepgo estimate: --offload %s with --stage 0: optimizer offload needs ZeRO stage 1, 2 or 3 (a config asking for it at stage 0 trains without it)\n", *where)
		return 2
	}
	if *gpn == 0 {
		*gpn = *world
	}
	if *world%*gpn != 0 {
		fmt.Fprintf(stderr, "deepgo estimate: --gpus-per-node %d does not divide --world %d\n", *gpn, *world)
		return 2
	}
	nodes := *world / *gpn
	P := int64(*params)
	L := int64(*largest)
	if L == 0 {
		L = P / 10
	}
	gb := func(b int64) float64 { return float64(b) / (1 << 30) }
	plural := func(n int, one, many string) string {
		if n > 1 {
			return many
		}
		return one
	}
	fmt.Fprintln(stdout, "Estimated memory needed for params, optim states and gradients for a:")
	fmt.Fprintf(stdout, "HW: Setup with %d %s, %d %s per node.\n", nodes, plural(nodes, "node", "nodes"), *gpn, plural(*gpn, "GPU", "GPUs"))
	cpuOpt := fmt.Sprintf("%-4s", "cpu")
	if *stage < 3 {
		fmt.Fprintf(stdout, "SW: Model with %dM total params.\n", P/1e6)
		fmt.Fprintln(stdout, "  per CPU  |  per GPU |   Options")
		for _, off := range []bool{true, false} {
			c, g := zero.EstimateZero2(P, *gpn, nodes, off, *factor)
			dev := "none"
			if off {
				dev = cpuOpt
			}
			fmt.Fprintf(stdout, " %7.2fGB | %6.2fGB | offload_optimizer=%s\n", gb(c), gb(g), dev)
		}
	} else {
		fmt.Fprintf(stdout, "SW: Model with %dM total params, %dM largest layer params.\n", P/1e6, L/1e6)
		fmt.Fprintln(stdout, "  per CPU  |  per GPU |   Options")
		for _, off := range []bool{true, false} {
			for _, offP := range []bool{true, false} {
				if !off && offP {
					continue
				}
				for _, zi := range []bool{true, false} {
					c, g, _ := zero.EstimateZero3(P, L, *gpn, nodes, off, offP, zi, *factor)
					dp, do := "none", "none"
					if offP {
						dp = cpuOpt
					}
					if off {
						do = cpuOpt
					}
					z := 0
					if zi {
						z = 1
					}
					fmt.Fprintf(stdout, " %7.2fGB | %6.2fGB | offload_param=%s, offload_optimizer=%s, zero_init=%d\n", gb(c), gb(g), dp, do, z)
				}
			}
		}
	}
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "deepgo, fp16 + Adam, stage %d, %d ranks (bytes per rank, one flat unit, model states only):\n", *stage, *world)
	lay, err := zero.PlanBuckets([]zero.ModuleSpec{{Name: "model", Params: []zero.ParamSpec{{Name: "flat", Shape: []int{int(P)}}}}}, *world, 2, 0)
	if err != nil {
		fmt.Fprintln(stderr, "deepgo estimate:", err)
		return 1
	}
	var rows strings.Builder
	for s := 0; s <= 3; s++ {
		mark := " "
		if s == *stage {
			mark = "*"
		}
		own := zero.PlannedModelStates(lay, s, 2, 2, 2)
		paper := zero.PaperModelStates(s, P, *world)
		fmt.Fprintf(&rows, " %s stage %d  %9.2fGB   (ZeRO paper %9.2fGB)\n", mark, s, gb(own), gb(paper))
	}
	fmt.Fprint(stdout, rows.String())
	fmt.Fprintln(stdout, "  plus buffers: up to 2 gradient buckets of reduce_bucket_size (stages 2-3), and for stage 3")
	fmt.Fprintf(stdout, "  the gathered modules (about stage3_max_live_parameters x 2 bytes; largest layer %.2fGB)\n", gb(2*L))
	pl, err := zero.PlannedPlacement(lay, *stage, 2, 2, 2, *where, *subGroup, offload.PlanOptions{Buffers: *buffers, PipelineRead: *pipeRead, PipelineWrite: *pipeWrite})
	if err != nil {
		fmt.Fprintln(stderr, "deepgo estimate:", err)
		return 1
	}
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "deepgo, stage %d, offload_optimizer=%s", *stage, *where)
	if *where == "nvme" {
		fmt.Fprintf(stdout, " (sub_group_size %d, buffer_count %d)", *subGroup, *buffers)
	}
	fmt.Fprintln(stdout, ", model states per rank on a device backend (on the CPU backend host is the sum):")
	for _, r := range []struct {
		name string
		b    int64
	}{{"host", pl.Host}, {"device", pl.Device}, {"disk", pl.Disk}} {
		fmt.Fprintf(stdout, "  %-6s %9.2fGB  %d bytes\n", r.name, gb(r.b), r.b)
	}
	return 0
}
