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
	"time"

	"github.com/deepgo-ml/deepgo/backend"
	"github.com/deepgo-ml/deepgo/internal/benchutil"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Point is one attention variant at one sequence length.
type Point struct {
	T        int     `json:"t"`
	Window   int     `json:"window"`      // 0: full causal
	AttBytes int     `json:"att_bytes"`   // saved softmax weights
	Pairs    int64   `json:"pairs"`       // (query, key) pairs the mask keeps: B·heads·(T·W - W(W-1)/2), or T(T+1)/2 per head
	NsPair   float64 `json:"ns_per_pair"` // total_ms per pair: flat when time grows with the pairs
	FwdMs    float64 `json:"fwd_ms"`      // best of reps
	BwdMs    float64 `json:"bwd_ms"`      // best of reps
	TotalMs  float64 `json:"total_ms"`    // fwd_ms + bwd_ms
}

// Fit is the least-squares slope of log(y) on log(T): y grows as T^slope.
type Fit struct {
	TimeExponent float64 `json:"time_exponent"`
	AttExponent  float64 `json:"att_bytes_exponent"`
	// PairsExponent is the work's own exponent (the pairs the mask keeps),
	// what TimeExponent should match: 2 for full attention, falling to 1
	// for the window as T grows past W.
	PairsExponent float64 `json:"pairs_exponent"`
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

// windowMain is -mode window: its flags are args.
func windowMain(args []string) error {
	fs := flag.NewFlagSet("bench-sp -mode window", flag.ContinueOnError)
	ts := fs.String("t", "256,512,1024,2048,4096", "sequence lengths, comma separated")
	window := fs.Int("window", 256, "attention window W (>= 1)")
	batch := fs.Int("batch", 1, "sequences per call")
	heads := fs.Int("heads", 4, "attention heads")
	hs := fs.Int("head-size", 32, "channels per head")
	threads := fs.Int("threads", 2, "C pool threads")
	reps := fs.Int("reps", 3, "timed rounds per point (best is reported)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return run("window", *ts, *window, *batch, *heads, *hs, *threads, *reps)
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
		ps, err := measure(be, []nn.Attention{{Heads: heads, HeadSize: hs}, {Heads: heads, HeadSize: hs, Window: window}}, batch, t, reps)
		if err != nil {
			return fmt.Errorf("sequence length %d: %w", t, err)
		}
		rep.Full, rep.Windowed = append(rep.Full, ps[0]), append(rep.Windowed, ps[1])
		f, w := rep.Full[len(rep.Full)-1], rep.Windowed[len(rep.Windowed)-1]
		rep.Ratios = append(rep.Ratios, Ratio{T: t, TimeRatio: f.TotalMs / w.TotalMs, AttRatio: float64(f.AttBytes) / float64(w.AttBytes)})
	}
	rep.FullFit = fit(rep.Full, 0)
	rep.WinFit = fit(rep.Windowed, 2*window)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// variant is one attention layer with its buffers, ready to run.
type variant struct {
	a        nn.Attention
	fwd, bwd func() error
	attN     int
	fb, bb   time.Duration // best forward and backward so far
}

// measure times one forward and one backward of each of as on b random
// sequences of t tokens, the variants taking turns within each of reps
// rounds so that a change in the machine's load hits them alike; the best
// of the rounds is reported.
func measure(be *backend.CPU, as []nn.Attention, b, t, reps int) ([]Point, error) {
	var bufs []*tensor.Tensor
	defer func() {
		for _, x := range bufs {
			x.Free()
		}
	}()
	r := rand.New(rand.NewPCG(uint64(t), 1))
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
	vs := make([]*variant, len(as))
	for i, a := range as {
		c := a.Heads * a.HeadSize
		v := &variant{a: a, attN: b * a.Heads * t * a.Span(t), fb: time.Duration(math.MaxInt64), bb: time.Duration(math.MaxInt64)}
		var qkv, out, att, dout, dqkv *tensor.Tensor
		var err error
		for _, s := range []struct {
			p      **tensor.Tensor
			n      int
			random bool
		}{{&qkv, b * t * 3 * c, true}, {&out, b * t * c, false}, {&att, v.attN, false}, {&dout, b * t * c, true}, {&dqkv, b * t * 3 * c, false}} {
			if *s.p, err = alloc(s.n, s.random); err != nil {
				return nil, err
			}
		}
		v.fwd = func() error { return a.Forward(be, out, att, qkv, b, t) }
		v.bwd = func() error { return a.Backward(be, dqkv, dout, qkv, att, b, t) }
		if err := v.fwd(); err != nil { // warm the pages and the pool
			return nil, fmt.Errorf("window %d: %w", a.Window, err)
		}
		vs[i] = v
	}
	for range reps {
		for _, v := range vs {
			for _, k := range []struct {
				f    func() error
				best *time.Duration
			}{{v.fwd, &v.fb}, {v.bwd, &v.bb}} {
				t0 := time.Now()
				if err := k.f(); err != nil {
					return nil, fmt.Errorf("window %d: %w", v.a.Window, err)
				}
				*k.best = min(*k.best, time.Since(t0))
			}
		}
	}
	ms := func(d time.Duration) float64 { return math.Round(d.Seconds()*1e6) / 1e3 }
	ps := make([]Point, len(vs))
	for i, v := range vs {
		pairs := v.a.Cost("", b, t).MACs / int64(2*v.a.HeadSize) // Cost counts 2·HeadSize MACs per pair
		ns := float64(v.fb+v.bb) / float64(pairs)
		ps[i] = Point{T: t, Window: v.a.Window, AttBytes: v.attN * 4, Pairs: pairs, NsPair: math.Round(ns*1000) / 1000,
			FwdMs: ms(v.fb), BwdMs: ms(v.bb), TotalMs: ms(v.fb + v.bb)}
	}
	return ps, nil
}

// fit is the log-log slope of time and att bytes on T; the tail fit takes
// the points with T >= tailFrom.
func fit(ps []Point, tailFrom int) Fit {
	var xs, ts, as, pr, tx, tt []float64
	for _, p := range ps {
		x := math.Log(float64(p.T))
		xs, ts, as = append(xs, x), append(ts, math.Log(p.TotalMs)), append(as, math.Log(float64(p.AttBytes)))
		pr = append(pr, math.Log(float64(p.Pairs)))
		if p.T >= tailFrom {
			tx, tt = append(tx, x), append(tt, math.Log(p.TotalMs))
		}
	}
	round := func(v float64) float64 { return math.Round(v*1000) / 1000 }
	return Fit{TimeExponent: round(slope(xs, ts)), AttExponent: round(slope(xs, as)), PairsExponent: round(slope(xs, pr)), TailTimeExponent: round(slope(tx, tt))}
}

// slope is the least-squares slope of y on x; 0 when it is undefined
// (fewer than 2 distinct x), since encoding/json refuses a NaN.
func slope(x, y []float64) float64 {
	n := float64(len(x))
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	d := n*sxx - sx*sx
	if len(x) < 2 || d <= 1e-12*n*sxx {
		return 0
	}
	return (n*sxy - sx*sy) / d
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
