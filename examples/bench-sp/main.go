// Command bench-sp measures what the sequence_parallel section buys. Its
// window mode (-mode window, sequence_parallel.attention_window_size) times
// the attention core (nn.Attention, forward and backward on the CPU
// backend) with full causal attention and with a sliding window of W keys
// at growing sequence lengths T, and reports the softmax weights it keeps
// (att, [B, heads, T, min(W, T)] floats) beside the time. The fitted
// exponents of time and memory in T show full attention growing as T² and
// the window as T·W (exponent 1 once T is a few windows long). It prints
// one JSON object.
//
//	go run ./examples/bench-sp -mode window [-t 256,512,1024,2048,4096] [-window 256]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Point is one attention variant at one sequence length.
type Point struct {
	T        int     `json:"t"`
	Window   int     `json:"window"`    // 0: full causal
	AttBytes int     `json:"att_bytes"` // saved softmax weights
	FwdMs    float64 `json:"fwd_ms"`    // best of reps
	BwdMs    float64 `json:"bwd_ms"`    // best of reps
	TotalMs  float64 `json:"total_ms"`  // fwd_ms + bwd_ms
}

// Fit is the least-squares slope of log(y) on log(T): y grows as T^slope.
type Fit struct {
	TimeExponent float64 `json:"time_exponent"`
	AttExponent  float64 `json:"att_bytes_exponent"`
	// TailTimeExponent fits only the points with T >= 2W (for the window;
	// all points for full attention): the T·W regime, past the first window
	// in which the window and full attention are the same.
	TailTimeExponent float64 `json:"tail_time_exponent"`
}

// Ratio compares full attention with the window at one T.
type Ratio struct {
	T         int     `json:"t"`
	TimeRatio float64 `json:"time_full_over_window"`
	AttRatio  float64 `json:"att_bytes_full_over_window"`
}

// Report is the whole output.
type Report struct {
	Machine  benchutil.Machine `json:"machine"`
	Mode     string            `json:"mode"`
	Batch    int               `json:"batch"`
	Heads    int               `json:"heads"`
	HeadSize int               `json:"head_size"`
	Window   int               `json:"window"`
	Threads  int               `json:"threads"`
	Reps     int               `json:"reps"`
	Full     []Point           `json:"full"`
	Windowed []Point           `json:"windowed"`
	FullFit  Fit               `json:"full_fit"`
	WinFit   Fit               `json:"window_fit"`
	Ratios   []Ratio           `json:"ratios"`
}

func main() {
	mode := flag.String("mode", "window", "what to measure: window (sliding-window against full attention)")
	ts := flag.String("t", "256,512,1024,2048,4096", "sequence lengths, comma separated")
	window := flag.Int("window", 256, "attention window W (>= 1)")
	batch := flag.Int("batch", 1, "sequences per call")
	heads := flag.Int("heads", 4, "attention heads")
	hs := flag.Int("head-size", 32, "channels per head")
	threads := flag.Int("threads", 2, "C pool threads")
	reps := flag.Int("reps", 3, "timed rounds per point (best is reported)")
	flag.Parse()
	if err := run(*mode, *ts, *window, *batch, *heads, *hs, *threads, *reps); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sp:", err)
		os.Exit(1)
	}
}

func run(mode, ts string, window, batch, heads, hs, threads, reps int) error {
	if mode != "window" {
		return fmt.Errorf("-mode %q: not supported: want window", mode)
	}
	lens, err := parseLens(ts)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"-window", window}, {"-batch", batch}, {"-heads", heads}, {"-head-size", hs}, {"-threads", threads}, {"-reps", reps}} {
		if f.v < 1 {
			return fmt.Errorf("%s %d: must be >= 1", f.name, f.v)
		}
	}
	be, err := backend.NewCPU(threads)
	if err != nil {
		return err
	}
	defer be.Close()
	rep := Report{Machine: benchutil.ThisMachine(), Mode: mode, Batch: batch, Heads: heads, HeadSize: hs, Window: window, Threads: threads, Reps: reps}
	for _, t := range lens {
		for _, w := range []int{0, window} {
			p, err := measure(be, nn.Attention{Heads: heads, HeadSize: hs, Window: w}, batch, t, reps)
			if err != nil {
				return fmt.Errorf("T %d window %d: %w", t, w, err)
			}
			if w == 0 {
				rep.Full = append(rep.Full, p)
			} else {
				rep.Windowed = append(rep.Windowed, p)
			}
		}
		f, w := rep.Full[len(rep.Full)-1], rep.Windowed[len(rep.Windowed)-1]
		rep.Ratios = append(rep.Ratios, Ratio{T: t, TimeRatio: f.TotalMs / w.TotalMs, AttRatio: float64(f.AttBytes) / float64(w.AttBytes)})
	}
	rep.FullFit = fit(rep.Full, 0)
	rep.WinFit = fit(rep.Windowed, 2*window)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// measure times one forward and one backward of a on b random sequences of
// t tokens.
func measure(be *backend.CPU, a nn.Attention, b, t, reps int) (Point, error) {
	c := a.Heads * a.HeadSize
	r := rand.New(rand.NewPCG(uint64(t), uint64(a.Window)))
	var bufs []*tensor.Tensor
	defer func() {
		for _, x := range bufs {
			x.Free()
		}
	}()
	alloc := func(n int, random bool) (*tensor.Tensor, error) {
		x, err := tensor.Empty(tensor.Float32, n)
		if err != nil {
			return nil, err
		}
		bufs = append(bufs, x)
		f, err := x.Float32s()
		if err != nil {
			return nil, err
		}
		for i := range f {
			f[i] = 0
			if random {
				f[i] = float32(r.NormFloat64())
			}
		}
		return x, nil
	}
	attN := b * a.Heads * t * a.Span(t)
	var qkv, out, att, dout, dqkv *tensor.Tensor
	var err error
	for _, s := range []struct {
		p      **tensor.Tensor
		n      int
		random bool
	}{{&qkv, b * t * 3 * c, true}, {&out, b * t * c, false}, {&att, attN, false}, {&dout, b * t * c, true}, {&dqkv, b * t * 3 * c, false}} {
		if *s.p, err = alloc(s.n, s.random); err != nil {
			return Point{}, err
		}
	}
	fwd := func() error { return a.Forward(be, out, att, qkv, b, t) }
	bwd := func() error { return a.Backward(be, dqkv, dout, qkv, att, b, t) }
	if err := fwd(); err != nil { // warm the pages and the pool
		return Point{}, err
	}
	fb, _, err := benchutil.Best(reps, fwd)
	if err != nil {
		return Point{}, err
	}
	bb, _, err := benchutil.Best(reps, bwd)
	if err != nil {
		return Point{}, err
	}
	ms := func(d float64) float64 { return math.Round(d*1e3) / 1e3 }
	p := Point{T: t, Window: a.Window, AttBytes: attN * 4, FwdMs: ms(fb.Seconds() * 1e3), BwdMs: ms(bb.Seconds() * 1e3)}
	p.TotalMs = ms(p.FwdMs + p.BwdMs)
	return p, nil
}

// fit is the log-log slope of time and att bytes on T; the tail fit takes
// the points with T >= tailFrom.
func fit(ps []Point, tailFrom int) Fit {
	var xs, ts, as, tx, tt []float64
	for _, p := range ps {
		x := math.Log(float64(p.T))
		xs, ts, as = append(xs, x), append(ts, math.Log(p.TotalMs)), append(as, math.Log(float64(p.AttBytes)))
		if p.T >= tailFrom {
			tx, tt = append(tx, x), append(tt, math.Log(p.TotalMs))
		}
	}
	round := func(v float64) float64 { return math.Round(v*1000) / 1000 }
	return Fit{TimeExponent: round(slope(xs, ts)), AttExponent: round(slope(xs, as)), TailTimeExponent: round(slope(tx, tt))}
}

// slope is the least-squares slope of y on x; 0 for fewer than 2 points
// (the slope is undefined, and encoding/json refuses a NaN).
func slope(x, y []float64) float64 {
	n := float64(len(x))
	if len(x) < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

func parseLens(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("-t %q: %q is not a sequence length >= 1", s, f)
		}
		out = append(out, v)
	}
	return out, nil
}
