package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/deepgo-ml/deepgo/zero"
)

func init() {
	register(command{name: "estimate", help: "ZeRO model-state memory per rank (DeepSpeed's estimates and deepgo's own)", run: runEstimate})
}

const estimateUsage = `usage:
  deepgo estimate --params N --world W [--stage S] [--offload cpu]
                  [--gpus-per-node G] [--largest-layer L] [--buffer-factor F]
      prints what DeepSpeed's estimate_zero2_model_states_mem_needs (stages
      1-2) or estimate_zero3_model_states_mem_needs (stage 3) print for the
      same inputs, then what deepgo allocates per rank for fp16 + Adam
`

// runEstimate implements "deepgo estimate".
func runEstimate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, estimateUsage) }
	params := fs.Float64("params", 0, "total model parameters (e.g. 1.3e9)")
	world := fs.Int("world", 0, "data-parallel ranks (GPUs) in total")
	stage := fs.Int("stage", 3, "ZeRO stage (0-3)")
	offload := fs.String("offload", "none", "optimizer offload device: none or cpu")
	gpn := fs.Int("gpus-per-node", 0, "ranks per node (default: --world, one node)")
	largest := fs.Float64("largest-layer", 0, "parameters of the largest module (stage 3; default params/10)")
	factor := fs.Float64("buffer-factor", 1.5, "DeepSpeed's additional_buffer_factor")
	if err := fs.Parse(args); err != nil {
		return 2
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
	case *offload != "none" && *offload != "cpu":
		fmt.Fprintf(stderr, "deepgo estimate: --offload %q: allowed none, cpu\n", *offload)
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
	if *offload == "cpu" {
		fmt.Fprintln(stdout, "  offload_optimizer=cpu: not supported yet by deepgo; showing the on-device layout")
	}
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
	return 0
}
