package commslog

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/deepgo-ml/deepgo/comm"
)

// opNames are DeepSpeed's names of the operations (deepspeed.comm's
// function names), the names prof_ops lists and the summary prints.
var opNames = map[comm.OpKind]string{
	comm.OpAllReduce:     "all_reduce",
	comm.OpReduceScatter: "reduce_scatter_tensor",
	comm.OpAllGather:     "all_gather_into_tensor",
	comm.OpBroadcast:     "broadcast",
	comm.OpReduce:        "reduce",
	comm.OpSend:          "send",
	comm.OpRecv:          "recv",
	comm.OpAllToAll:      "all_to_all_single",
	comm.OpBarrier:       "barrier",
}

// aliases are the other names DeepSpeed's comms logger accepts for an
// operation deepgo has one form of.
var aliases = map[string]string{
	"all_gather":     "all_gather_into_tensor",
	"reduce_scatter": "reduce_scatter_tensor",
	"all_to_all":     "all_to_all_single",
	"isend":          "send",
	"irecv":          "recv",
}

// OpName is DeepSpeed's name of op, e.g. "all_reduce".
func OpName(op comm.OpKind) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return op.String()
}

// BusFactor is NCCL-tests' correction from algorithm bandwidth to bus
// bandwidth for op on a group of n ranks (doc/PERFORMANCE.md): 2(n-1)/n
// for all-reduce, (n-1)/n for reduce-scatter, all-gather and all-to-all, 1
// for broadcast, reduce, send and recv, 0 for a barrier (it moves no data).
func BusFactor(op comm.OpKind, n int) float64 {
	if n < 1 {
		return 0
	}
	f := float64(n-1) / float64(n)
	switch op {
	case comm.OpAllReduce:
		return 2 * f
	case comm.OpReduceScatter, comm.OpAllGather, comm.OpAllToAll:
		return f
	case comm.OpBroadcast, comm.OpReduce, comm.OpSend, comm.OpRecv:
		return 1
	}
	return 0
}

// Bandwidth returns NCCL-tests' algorithm and bus bandwidths, in Gbps (10^9
// bits per second, the unit of DeepSpeed's table), of an operation op of
// size bytes (the size S of MessageBytes) on n ranks that took d:
// algbw = S/d, busbw = algbw × BusFactor(op, n). A zero duration gives
// zeros rather than infinities.
//
// DeepSpeed's comms logger reports twice this algbw for all-reduce; deepgo
// keeps NCCL-tests' definition, so that busbw/algbw is the factor above
// for every operation.
func Bandwidth(op comm.OpKind, bytes int64, n int, d time.Duration) (algbw, busbw float64) {
	if d <= 0 {
		return 0, 0
	}
	algbw = float64(bytes) * 8 / d.Seconds() / 1e9
	return algbw, algbw * BusFactor(op, n)
}

// MessageBytes is the size S of an operation in NCCL-tests' sense, from
// the per-rank unit a comm.Call records (count elements of elemSize bytes)
// on n ranks: the tensor for all-reduce, broadcast, reduce, send and recv;
// the whole array, n units, for reduce-scatter (its input), all-gather
// (its output) and all-to-all (either buffer); 0 for a barrier.
func MessageBytes(op comm.OpKind, count, elemSize, n int) int64 {
	b := int64(count) * int64(elemSize)
	switch op {
	case comm.OpReduceScatter, comm.OpAllGather, comm.OpAllToAll:
		return b * int64(n)
	case comm.OpBarrier, comm.OpSplit:
		return 0
	}
	return b
}

// convertSize is DeepSpeed's convert_size: bytes in the largest binary
// unit that leaves at least 1, rounded to 2 decimals and printed like a
// Python float ("0B", "512.0 B", "1.5 KB").
func convertSize(b int64) string {
	if b <= 0 {
		return "0B"
	}
	units := []string{"B", "KB", "MB", "GB", "TB", "PB", "EB"}
	i := int(math.Floor(math.Log(float64(b)) / math.Log(1024)))
	i = min(max(i, 0), len(units)-1)
	// formatting with 2 decimals rounds the exact binary value as Python's
	// round does; parsing back drops the trailing zeros Python's str drops
	s := strconv.FormatFloat(float64(b)/math.Pow(1024, float64(i)), 'f', 2, 64)
	v, _ := strconv.ParseFloat(s, 64)
	return fmt.Sprintf("%s %s", pyFloat(v), units[i])
}

// pyFloat prints v the way Python's str prints a float of this size: the
// shortest representation, with ".0" for an integral value.
func pyFloat(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	for _, c := range s {
		if c == '.' {
			return s
		}
	}
	return s + ".0"
}
