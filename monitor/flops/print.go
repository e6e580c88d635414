package flops

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/deepgo-ml/deepgo/config"
)

// Options choose what Write prints: flops_profiler's module_depth (-1: all
// but the innermost, as DeepSpeed's loop does), top_modules and detailed.
type Options struct {
	ModuleDepth, TopModules int
	Detailed                bool
}

// Print writes r as cfg asks: to cfg.OutputFile (its directory created)
// or, when that is unset or empty, to stdout.
func Print(cfg config.FlopsProfiler, r *Report, stdout io.Writer) (err error) {
	o := Options{ModuleDepth: cfg.ModuleDepth, TopModules: cfg.TopModules, Detailed: cfg.Detailed}
	if cfg.OutputFile == nil || *cfg.OutputFile == "" {
		return r.Write(stdout, o)
	}
	path := *cfg.OutputFile
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("flops: flops_profiler.output_file %q: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("flops: flops_profiler.output_file %q: %w", path, err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	return r.Write(f, o)
}

// num is DeepSpeed's number_to_string: the value in the largest SI unit
// that leaves at least 1, rounded to 2 decimals, printed with Python's :g.
func num(v float64) string {
	units := []struct {
		mag float64
		u   string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "K"}, {1, ""}, {1e-3, "m"}, {1e-6, "u"}}
	i := 0
	for i < len(units)-1 && v < units[i].mag && (v != 0 || units[i].mag != 1) {
		i++
	}
	return pyG(v/units[i].mag) + " " + units[i].u
}

// pyG is Python's f"{round(v, 2):g}".
func pyG(v float64) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 2, 64), 64)
	return strconv.FormatFloat(r, 'g', 6, 64)
}

func paramsStr(p int64) string {
	return strings.TrimSpace(strings.ReplaceAll(num(float64(p)), "G", "B"))
}
func macsStr(m int64) string        { return num(float64(m)) + "MACs" }
func flopsStr(f float64) string     { return num(f) + "FLOPS" }
func durStr(d time.Duration) string { return num(d.Seconds()) + "s" }

// ratio is a/b, 0 when b is 0 (nothing measured, nothing to divide).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Write prints r in DeepSpeed's print_model_profile layout: the summary,
// the aggregated profile by depth and, with Detailed, the module tree.
func (r *Report) Write(w io.Writer, o Options) error {
	var b strings.Builder
	line := func(k string, v any) { fmt.Fprintf(&b, "%-70s  %-8v\n", k, v) }
	root := r.Root
	b.WriteString("\n-------------------------- DeepSpeed Flops Profiler --------------------------\n")
	fmt.Fprintf(&b, "Profile Summary at step %d:\n", r.Step)
	b.WriteString("Notations:\ndata parallel size (dp_size), model parallel size(mp_size),\n" +
		"number of parameters (params), number of multiply-accumulate operations(MACs),\n" +
		"number of floating-point operations (flops), floating-point operations per second (FLOPS),\n" +
		"fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n" +
		"step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n")
	// the one count that differs from DeepSpeed's on purpose (nn.Cost)
	b.WriteString("deepgo: Attention MACs count the (query, key) pairs its causal or windowed mask keeps,\n" +
		"about half of the T x T pairs DeepSpeed counts for scaled_dot_product_attention\n\n")
	mp := max(r.ModelParallel, 1)
	if r.World > 0 {
		line("world size: ", r.World)
		line("data parallel size: ", r.DataParallel)
		line("model parallel size: ", mp)
		line("batch size per GPU: ", r.MicroBatch)
	}
	line("params per GPU: ", paramsStr(root.Params))
	line("params of model = params per GPU * mp_size: ", paramsStr(root.Params*int64(mp)))
	line("fwd MACs per GPU: ", macsStr(root.MACs))
	line("fwd flops per GPU: ", num(float64(root.FLOPs)))
	line("fwd flops of model = fwd flops per GPU * mp_size: ", num(float64(root.FLOPs*int64(mp))))
	fwd := root.Latency
	if r.Forward > 0 {
		fwd = r.Forward
	}
	fl := float64(root.FLOPs)
	rate := func(f float64, d time.Duration) string {
		return flopsStr(ratio(f, d.Seconds()))
	}
	line("fwd latency: ", durStr(fwd))
	line("fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ", rate(fl, fwd))
	if r.Backward > 0 {
		bf := 2 + r.RecomputeFwdFactor
		line("bwd latency: ", durStr(r.Backward))
		line(fmt.Sprintf("bwd FLOPS per GPU = %s * fwd flops per GPU / bwd latency: ", pyG(bf)), rate(bf*fl, r.Backward))
		line(fmt.Sprintf("fwd+bwd FLOPS per GPU = %s * fwd flops per GPU / (fwd+bwd latency): ", pyG(bf+1)), rate((bf+1)*fl, fwd+r.Backward))
		iter := fwd + r.Backward + r.StepTime
		line("step latency: ", durStr(r.StepTime))
		line("iter latency: ", durStr(iter))
		line(fmt.Sprintf("FLOPS per GPU = %s * fwd flops per GPU / iter latency: ", pyG(bf+1)), rate((bf+1)*fl, iter))
		if r.MicroBatch > 0 && r.World > 0 {
			line("samples/second: ", pyG(float64(r.MicroBatch*r.World)/iter.Seconds()))
		}
	}
	b.WriteString("\n----------------------------- Aggregated Profile per GPU -----------------------------\n")
	r.aggregated(&b, o)
	if o.Detailed {
		b.WriteString("\n------------------------------ Detailed Profile per GPU ------------------------------\n")
		b.WriteString("Each module profile is listed after its name in the following order: \n" +
			"params, percentage of total params, MACs, percentage of total MACs, fwd latency, percentage of total fwd latency, fwd FLOPS\n\n" +
			"Note: 1. MACs and flops are analytic counts from the layers' shapes (nn.Cost), not measurements; the loss is not a module and is not counted.\n" +
			"2. Latency is measured per engine module only; the layers inside a module show \"latency not measured\".\n" +
			"3. The top module's latency is the sum of the modules' forwards, less than the fwd latency above when that is the engine's timer.\n\n")
		r.detailed(&b, root, "", 0)
	}
	for _, n := range r.Notes {
		b.WriteString("Note: " + n + "\n")
	}
	b.WriteString("------------------------------------------------------------------------------\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// aggregated is print_model_aggregated_profile: per depth, the top kinds
// by summed params, MACs and latency.
func (r *Report) aggregated(b *strings.Builder, o Options) {
	type agg struct {
		kind         string
		macs, params int64
		lat          time.Duration
		measured     bool
	}
	var levels [][]*agg
	var walk func(n *Node, d int)
	walk = func(n *Node, d int) {
		if d == len(levels) {
			levels = append(levels, nil)
		}
		var a *agg
		for _, x := range levels[d] {
			if x.kind == n.Kind {
				a = x
			}
		}
		if a == nil {
			a = &agg{kind: n.Kind}
			levels[d] = append(levels[d], a)
		}
		a.macs, a.params, a.lat = a.macs+n.MACs, a.params+n.Params, a.lat+n.Latency
		a.measured = a.measured || n.Measured
		for _, c := range n.Children {
			walk(c, d+1)
		}
	}
	walk(r.Root, 0)
	depth := o.ModuleDepth
	if depth == -1 {
		depth = len(levels) - 1
	}
	top := max(o.TopModules, 1)
	fmt.Fprintf(b, "Top %d modules in terms of params, MACs or fwd latency at different model depths:\n", top)
	for d := 0; d < depth && d < len(levels); d++ {
		dict := func(less func(x, y *agg) bool, str func(a *agg) string) string {
			s := append([]*agg(nil), levels[d]...)
			sort.SliceStable(s, func(i, j int) bool { return less(s[i], s[j]) })
			var parts []string
			for _, a := range s[:min(top, len(s))] {
				parts = append(parts, fmt.Sprintf("'%s': '%s'", a.kind, str(a)))
			}
			return "{" + strings.Join(parts, ", ") + "}"
		}
		fmt.Fprintf(b, "depth %d:\n", d)
		fmt.Fprintf(b, "    params      - %s\n", dict(func(x, y *agg) bool { return x.params > y.params }, func(a *agg) string { return paramsStr(a.params) }))
		fmt.Fprintf(b, "    MACs        - %s\n", dict(func(x, y *agg) bool { return x.macs > y.macs }, func(a *agg) string { return macsStr(a.macs) }))
		measured := false
		for _, a := range levels[d] {
			measured = measured || a.measured
		}
		if !measured {
			b.WriteString("    fwd latency - not measured at this depth\n")
			continue
		}
		fmt.Fprintf(b, "    fwd latency - %s\n", dict(func(x, y *agg) bool { return x.lat > y.lat }, func(a *agg) string { return durStr(a.lat) }))
	}
}

// detailed prints n the way PyTorch prints a module, each line carrying the
// profile DeepSpeed's extra_repr adds.
func (r *Report) detailed(b *strings.Builder, n *Node, label string, indent int) {
	root := r.Root
	items := fmt.Sprintf("%s = %s%% Params, %s = %s%% MACs, ", paramsStr(n.Params), pyG(100*ratio(float64(n.Params), float64(root.Params))),
		macsStr(n.MACs), pyG(100*ratio(float64(n.MACs), float64(root.MACs))))
	if n.Measured {
		items += fmt.Sprintf("%s = %s%% latency, %s", durStr(n.Latency), pyG(100*ratio(float64(n.Latency), float64(root.Latency))),
			flopsStr(ratio(float64(n.FLOPs), n.Latency.Seconds())))
	} else {
		items += "latency not measured"
	}
	pad := strings.Repeat("  ", indent)
	if len(n.Children) == 0 {
		fmt.Fprintf(b, "%s%s%s(%s)\n", pad, label, n.Kind, items)
		return
	}
	fmt.Fprintf(b, "%s%s%s(\n%s  %s\n", pad, label, n.Kind, pad, items)
	for _, c := range n.Children {
		short := strings.TrimPrefix(c.Name, n.Name+".")
		r.detailed(b, c, "("+short+"): ", indent+1)
	}
	fmt.Fprintf(b, "%s)\n", pad)
}
