// Package commslog is DeepSpeed's comms_logger for deepgo: a comm.Comm
// wrapper that records, per operation and message size, the count, the
// latency and NCCL-tests' algorithm and bus bandwidths, prints a line per
// operation when verbose, and prints DeepSpeed's summary table (log_all).
//
// The latency of a blocking call runs from the call to its return; that of
// an Async call from the call to the first Wait that sees the operation
// over (so it includes whatever the caller did before waiting). Failed
// operations are not recorded. The wrapper changes nothing else: results,
// errors, deadlines and Split (whose groups are wrapped too, recording into
// the same Logger) are the wrapped comm's.
package commslog

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
)

// Options configure a Logger; FromConfig fills them from the comms_logger
// section.
type Options struct {
	// Verbose prints a line per recorded operation to Log (on world rank 0
	// only, as DeepSpeed's log_dist).
	Verbose bool
	// ProfAll records every operation; otherwise only those in ProfOps.
	ProfAll bool
	// ProfOps lists DeepSpeed operation names ("all_reduce", ...), see
	// OpNames.
	ProfOps []string
	// Debug appends the calling function to the record name, as DeepSpeed's
	// "| [Caller Func: f]".
	Debug bool
	// Log receives the verbose lines; nil is os.Stderr.
	Log io.Writer
	// Now is the clock; nil is time.Now. Tests set it.
	Now func() time.Time
}

// OpNames lists the operation names ProfOps accepts: DeepSpeed's names of
// the operations deepgo's comm has, and the aliases DeepSpeed's logger
// knows for them.
func OpNames() []string {
	var ns []string
	for _, n := range opNames {
		ns = append(ns, n)
	}
	for a := range aliases {
		ns = append(ns, a)
	}
	slices.Sort(ns)
	return ns
}

// FromConfig turns the comms_logger section into Options. It does not look
// at Enabled: whether to wrap the comm at all is the caller's choice.
func FromConfig(c config.CommsLogger) (Options, error) {
	o := Options{Verbose: c.Verbose, ProfAll: c.ProfAll, ProfOps: c.ProfOps, Debug: c.Debug}
	if _, err := profiled(o); err != nil {
		return Options{}, err
	}
	return o, nil
}

// profiled maps each operation to whether o records it; a ProfOps name
// that is no operation is an error naming it.
func profiled(o Options) (map[comm.OpKind]bool, error) {
	on := map[comm.OpKind]bool{}
	byName := map[string]comm.OpKind{}
	for k, n := range opNames {
		on[k] = o.ProfAll
		byName[n] = k
	}
	for i, n := range o.ProfOps {
		if a, ok := aliases[n]; ok {
			n = a
		}
		k, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("commslog: comms_logger.prof_ops[%d] = %q: allowed %s", i, o.ProfOps[i], strings.Join(OpNames(), ", "))
		}
		on[k] = true
	}
	return on, nil
}

// Logger collects the records of every comm it wrapped. It is safe for
// concurrent use.
type Logger struct {
	opts Options
	on   map[comm.OpKind]bool

	mu    sync.Mutex
	names []string // record names in first-seen order, as DeepSpeed's dict
	recs  map[string]map[int64]*samples
}

// samples are the measurements of one record name and message size.
type samples struct {
	lat, algbw, busbw []float64 // ms, Gbps, Gbps
}

// New returns a Logger, or an error naming a ProfOps entry that is no
// operation.
func New(o Options) (*Logger, error) {
	on, err := profiled(o)
	if err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Logger{opts: o, on: on, recs: map[string]map[int64]*samples{}}, nil
}

// Reset drops every record.
func (l *Logger) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names, l.recs = nil, map[string]map[int64]*samples{}
}

// record adds one successful operation of bytes on c that took d.
func (l *Logger) record(c comm.Comm, op comm.OpKind, name string, bytes int64, d time.Duration) {
	algbw, busbw := Bandwidth(op, bytes, c.Size(), d)
	ms := float64(d) / float64(time.Millisecond)
	l.mu.Lock()
	bySize, ok := l.recs[name]
	if !ok {
		bySize = map[int64]*samples{}
		l.recs[name] = bySize
		l.names = append(l.names, name)
	}
	s, ok := bySize[bytes]
	if !ok {
		s = &samples{}
		bySize[bytes] = s
	}
	s.lat = append(s.lat, ms)
	s.algbw = append(s.algbw, algbw)
	s.busbw = append(s.busbw, busbw)
	l.mu.Unlock()
	if l.opts.Verbose && worldRank(c) == 0 {
		fmt.Fprintf(l.opts.Log, "[Rank 0] rank=%d | comm op: %s | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f  | busbw (Gbps): %.2f \n",
			worldRank(c), name, ms, convertSize(bytes), algbw, busbw)
	}
}

func worldRank(c comm.Comm) int {
	if m := c.Members(); c.Rank() < len(m) {
		return m[c.Rank()]
	}
	return c.Rank()
}

// recordName is DeepSpeed's name of op, with the caller skip frames up
// when Debug is set.
func (l *Logger) recordName(op comm.OpKind, skip int) string {
	n := OpName(op)
	if !l.opts.Debug {
		return n
	}
	caller := "unknown"
	if pc, _, _, ok := runtime.Caller(skip + 1); ok {
		if f := runtime.FuncForPC(pc); f != nil {
			caller = f.Name()
			if i := strings.LastIndexByte(caller, '/'); i >= 0 {
				caller = caller[i+1:]
			}
		}
	}
	return n + " | [Caller Func: " + caller + "]"
}

// OpStats summarises one record name and message size: the row of
// DeepSpeed's table.
type OpStats struct {
	// Name is the operation's DeepSpeed name (with the caller under Debug).
	Name string
	// Bytes is the message size S (see Bandwidth).
	Bytes int64
	// Count is the number of operations recorded.
	Count int
	// Total is the sum of their latencies.
	Total time.Duration
	// AvgLatency, AlgbwGbps and BusbwGbps are means with the top and
	// bottom 10% dropped, DeepSpeed's trim_mean(·, 0.1).
	AvgLatency           time.Duration
	AlgbwGbps, BusbwGbps float64
}

// Stats lists every record, by name in first-seen order, then by size.
func (l *Logger) Stats() []OpStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []OpStats
	for _, n := range l.names {
		sizes := make([]int64, 0, len(l.recs[n]))
		for b := range l.recs[n] {
			sizes = append(sizes, b)
		}
		slices.Sort(sizes)
		for _, b := range sizes {
			s := l.recs[n][b]
			total := 0.0
			for _, v := range s.lat {
				total += v
			}
			out = append(out, OpStats{Name: n, Bytes: b, Count: len(s.lat),
				Total:      msDuration(total),
				AvgLatency: msDuration(trimMean(s.lat, 0.1)),
				AlgbwGbps:  trimMean(s.algbw, 0.1), BusbwGbps: trimMean(s.busbw, 0.1)})
		}
	}
	return out
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// trimMean is the mean of v without its lowest and highest
// round(len·frac) values (0 when nothing is left), as DeepSpeed's.
func trimMean(v []float64, frac float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	k := int(float64(len(s))*frac + 0.5)
	if 2*k >= len(s) {
		return 0
	}
	sum := 0.0
	for _, x := range s[k : len(s)-k] {
		sum += x
	}
	return sum / float64(len(s)-2*k)
}

// Summary writes DeepSpeed's log_all table: a header, then each operation's
// name on a line of its own followed by a row per message size, every
// column 20 characters wide.
func (l *Logger) Summary(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s%-20s%-20s%-20s%-20s%-20s%-20s\n", "Comm. Op", "Message Size", "Count",
		"Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)")
	prev := ""
	for i, s := range l.Stats() {
		if i == 0 || s.Name != prev {
			b.WriteString(s.Name + "\n")
			prev = s.Name
		}
		fmt.Fprintf(&b, "%-20s%-20s%-20d%-20.2f%-20.2f%-20.2f%-20.2f\n", " ", convertSize(s.Bytes), s.Count,
			float64(s.Total)/float64(time.Millisecond), float64(s.AvgLatency)/float64(time.Millisecond), s.AlgbwGbps, s.BusbwGbps)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
