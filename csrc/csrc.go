// Package csrc is the mechanical Go binding of deepgo's C core: one Go
// function per function of csrc/include/deepgo.h, taking raw pointers and
// element counts, returning the C status as a *Error. Idiomatic types
// (tensor.Tensor, backend.Backend) are built on top of it in other packages.
//
// The C sources in this directory are compiled by cgo, so `go build` needs
// nothing but a C compiler. Memory passed to these functions must be C memory
// (from Alloc or the CUDA allocator): C never receives or keeps a Go pointer
// to Go memory holding pointers.
//
// -std=c11 matters beyond the dialect: in ISO mode GCC does not contract a*b+c
// into a fused multiply-add (-ffp-contract=off, which cgo's flag list does not
// allow naming directly), so the C loops round exactly like dg_math.h says.
//
// include_hash.go records the headers of include/ (go generate; see
// internal/inchash), so that an edit to one of them alone rebuilds this
// package instead of testing cached objects.
package csrc

//go:generate go run ../internal/inchash/gen -pkg csrc -dir include

/*
#cgo CFLAGS: -std=c11 -O2 -Wall -Wextra -Wundef -I${SRCDIR}/include -pthread
#cgo LDFLAGS: -pthread -lm
#cgo noescape dg_cast
#cgo nocallback dg_cast
#cgo noescape dg_scale
#cgo nocallback dg_scale
#cgo noescape dg_axpy
#cgo nocallback dg_axpy
#cgo noescape dg_axpy_mixed
#cgo nocallback dg_axpy_mixed
#cgo noescape dg_sumsq
#cgo nocallback dg_sumsq
#cgo noescape dg_zero
#cgo nocallback dg_zero
#cgo noescape dg_nonfinite
#cgo nocallback dg_nonfinite
#cgo noescape dg_pack
#cgo nocallback dg_pack
#cgo noescape dg_unpack
#cgo nocallback dg_unpack
#cgo noescape dg_reduce_into
#cgo nocallback dg_reduce_into
#cgo noescape dg_reduce_bcast
#cgo nocallback dg_reduce_bcast
#include <stdlib.h>
#include "deepgo.h"
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"
)

// Status is a dg_status code.
type Status int

// Status codes, equal to deepgo.h's dg_status values.
const (
	OK          Status = C.DG_OK
	Invalid     Status = C.DG_ERR_INVALID
	NoMem       Status = C.DG_ERR_NOMEM
	BadDType    Status = C.DG_ERR_DTYPE
	Misaligned  Status = C.DG_ERR_ALIGN
	BadSize     Status = C.DG_ERR_SIZE
	Unsupported Status = C.DG_ERR_UNSUPPORTED
	IOError     Status = C.DG_ERR_IO
	CUDAError   Status = C.DG_ERR_CUDA
	Internal    Status = C.DG_ERR_INTERNAL
)

// String returns the C core's name for the status.
func (s Status) String() string { return C.GoString(C.dg_strerror(C.dg_status(s))) }

// Error is a failed C call: which function and the status it returned.
// Use errors.As to get at Code, or errors.Is with a Status.
type Error struct {
	Op   string // the C function, e.g. "dg_cast"
	Code Status
}

func (e *Error) Error() string { return fmt.Sprintf("deepgo core: %s: %s", e.Op, e.Code) }

// Is reports whether target is the same Status, so errors.Is(err, csrc.NoMem) works.
func (e *Error) Is(target error) bool {
	if s, ok := target.(Status); ok {
		return s == e.Code
	}
	return false
}

// Error makes a bare Status usable as an error target.
func (s Status) Error() string { return s.String() }

func check(op string, s C.dg_status) error {
	if s == C.DG_OK {
		return nil
	}
	return &Error{Op: op, Code: Status(s)}
}

// DType is a dg_dtype value.
type DType int

// Element types, equal to deepgo.h's dg_dtype values.
const (
	F32  DType = C.DG_F32
	F16  DType = C.DG_F16
	BF16 DType = C.DG_BF16
	I32  DType = C.DG_I32
	I64  DType = C.DG_I64
	U8   DType = C.DG_U8
	Bool DType = C.DG_BOOL
	F64  DType = C.DG_F64
)

// ISA names an instruction set of the CPU kernels.
type ISA int

// Instruction sets, equal to deepgo.h's dg_isa values.
const (
	ISAAuto   ISA = C.DG_ISA_AUTO
	ISAScalar ISA = C.DG_ISA_SCALAR
	ISAAVX2   ISA = C.DG_ISA_AVX2
	ISAAVX512 ISA = C.DG_ISA_AVX512
)

func (i ISA) String() string {
	switch i {
	case ISAAuto:
		return "auto"
	case ISAScalar:
		return "scalar"
	case ISAAVX2:
		return "avx2"
	case ISAAVX512:
		return "avx512"
	}
	return fmt.Sprintf("isa(%d)", int(i))
}

// BestISA reports the best instruction set this CPU supports.
func BestISA() ISA { return ISA(C.dg_cpu_best_isa()) }

// ReduceOp is a dg_redop value.
type ReduceOp int

// Reduction operators, equal to deepgo.h's dg_redop values.
const (
	Sum ReduceOp = C.DG_SUM
	Max ReduceOp = C.DG_MAX
	Min ReduceOp = C.DG_MIN
)

// Ctx is a dg_ctx: the C core's thread pool and dispatch choice. A Ctx may be
// used from several goroutines at once (see deepgo.h); Close it once, after
// every call on it has returned.
type Ctx struct {
	c *C.dg_ctx
}

// NewCtx creates a context with threads workers (<= 0: one per CPU).
func NewCtx(threads int) (*Ctx, error) {
	var c *C.dg_ctx
	if err := check("dg_ctx_create", C.dg_ctx_create(C.int(threads), &c)); err != nil {
		return nil, err
	}
	return &Ctx{c: c}, nil
}

// Close releases the context's threads. Calling it twice is a no-op.
func (x *Ctx) Close() {
	if x.c != nil {
		C.dg_ctx_destroy(x.c)
		x.c = nil
	}
}

// Threads reports the pool size.
func (x *Ctx) Threads() int { return int(C.dg_ctx_threads(x.c)) }

// SetThreads resizes the pool; no other call on x may be in flight.
func (x *Ctx) SetThreads(n int) error {
	return check("dg_ctx_set_threads", C.dg_ctx_set_threads(x.c, C.int(n)))
}

// SetSpin sets how long the pool's threads spin waiting for the next
// parallel region before they sleep (0 to 1s; 0 sleeps at once). The
// default spins 500us after a region that came within that time of the one
// before, 5us otherwise. No other call on x may be in flight.
func (x *Ctx) SetSpin(d time.Duration) error {
	return check("dg_ctx_set_spin", C.dg_ctx_set_spin(x.c, C.int64_t(d.Nanoseconds())))
}

// ISA reports the instruction set the kernels dispatch to.
func (x *Ctx) ISA() ISA { return ISA(C.dg_ctx_isa(x.c)) }

// ScratchPeak reports the most bytes of kernel scratch (the float32 tiles
// of the mixed-precision nn kernels) allocated at once on x since it was
// created or last reset; reset restarts the count from what is allocated now.
func (x *Ctx) ScratchPeak(reset bool) (int64, error) {
	var peak C.int64_t
	r := C.int(0)
	if reset {
		r = 1
	}
	err := check("dg_ctx_scratch_peak", C.dg_ctx_scratch_peak(x.c, r, &peak))
	return int64(peak), err
}

// PoolBalance is how evenly a context's thread pool was kept busy (see
// Ctx.PoolBalance).
type PoolBalance struct {
	// Regions counts the parallel regions the pool ran.
	Regions int64
	// Busy is the threads' summed wall time in their parts of a region.
	Busy time.Duration
	// Idle is the threads' summed wait, within each region, for the
	// region's slowest part.
	Idle time.Duration
}

// IdleShare is Idle over Busy + Idle: the share of the pool's thread time
// in regions spent waiting for a slower thread (0 when nothing ran).
func (b PoolBalance) IdleShare() float64 {
	if b.Busy+b.Idle <= 0 {
		return 0
	}
	return b.Idle.Seconds() / (b.Busy + b.Idle).Seconds()
}

// PoolBalance reports, since x was created, resized or last reset, the
// parallel regions its pool ran and how long threads waited in them for the
// slowest part: a region splits equal work, so the wait is threads running
// at unequal speeds (or work split unevenly). A one-thread context has no
// pool and reports zeros. reset restarts the counts; not to be called while
// another call on x is in flight.
func (x *Ctx) PoolBalance(reset bool) (PoolBalance, error) {
	var regions, busy, idle C.int64_t
	r := C.int(0)
	if reset {
		r = 1
	}
	err := check("dg_ctx_pool_balance", C.dg_ctx_pool_balance(x.c, r, &regions, &busy, &idle))
	return PoolBalance{Regions: int64(regions), Busy: time.Duration(busy), Idle: time.Duration(idle)}, err
}

// SetISA forces an instruction set (for tests and benchmarks).
func (x *Ctx) SetISA(i ISA) error { return check("dg_ctx_set_isa", C.dg_ctx_set_isa(x.c, C.dg_isa(i))) }

// HugePagesEnv names the environment variable that turns off Alloc's
// transparent huge pages: "0" gives every buffer 4 KiB pages; unset, empty
// or "1" leaves them on. Turn them off where a large allocation must not
// wait for the kernel to compact memory (THP defrag "madvise", under memory
// pressure).
const HugePagesEnv = "DEEPGO_HUGEPAGES"

// hugeFlag is the dg_alloc flag HugePagesEnv asks for, read once.
var hugeFlag = sync.OnceValues(func() (C.int, error) {
	switch v := os.Getenv(HugePagesEnv); v {
	case "", "1":
		return C.DG_ALLOC_HUGE, nil
	case "0":
		return 0, nil
	default:
		return 0, fmt.Errorf("%s=%q: want 0 (4 KiB pages) or 1 (huge pages for buffers of 2 MiB and more; the default)", HugePagesEnv, v)
	}
})

// HugePages reports whether Alloc asks for huge pages, or the error
// HugePagesEnv's value gives (every Alloc fails with it then).
func HugePages() (bool, error) {
	f, err := hugeFlag()
	return f != 0, err
}

// Alloc returns zeroed C memory of bytes, aligned to align (a power of two
// >= 64). Buffers of 2 MiB and more are aligned to 2 MiB and advised to the
// kernel as transparent huge pages before they are touched (HugePagesEnv
// turns that off): streaming kernels such as the fused AdamW step run
// 10-30% faster on them. Release it with Free; Go must not use it
// afterwards.
func Alloc(bytes int, align int) (unsafe.Pointer, error) {
	if bytes < 0 {
		return nil, &Error{Op: "dg_alloc", Code: Invalid}
	}
	flags, err := hugeFlag()
	if err != nil {
		return nil, fmt.Errorf("dg_alloc: %w", err)
	}
	var p unsafe.Pointer
	if err := check("dg_alloc", C.dg_alloc(C.size_t(bytes), C.size_t(align), flags, &p)); err != nil {
		return nil, err
	}
	return p, nil
}

// Free releases memory from Alloc.
func Free(p unsafe.Pointer) { C.dg_free(p) }

// DTypeSize reports the element size of t in bytes, 0 if unknown.
func DTypeSize(t DType) int { return int(C.dg_dtype_size(C.dg_dtype(t))) }

// list turns Go slices into the C (pointer, count) form. The slices are Go
// memory holding C pointers only, which cgo permits to pass.
func ptrs(p []unsafe.Pointer) *unsafe.Pointer {
	if len(p) == 0 {
		return nil
	}
	return &p[0]
}

func i64s(n []int64) *C.int64_t {
	if len(n) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&n[0]))
}

func sameLen(op string, a, b int) error {
	if a != b {
		return &Error{Op: op, Code: BadSize}
	}
	return nil
}

// Cast converts srcs[i] (dtype src) into dsts[i] (dtype dst), ns[i] elements each.
func (x *Ctx) Cast(src, dst DType, srcs, dsts []unsafe.Pointer, ns []int64) error {
	if err := sameLen("dg_cast", len(srcs), len(dsts)); err != nil {
		return err
	}
	if err := sameLen("dg_cast", len(srcs), len(ns)); err != nil {
		return err
	}
	return check("dg_cast", C.dg_cast(x.c, C.dg_dtype(src), C.dg_dtype(dst),
		ptrs(srcs), ptrs(dsts), i64s(ns), C.int(len(ns))))
}

// Scale multiplies each xs[i] in place by alpha.
func (x *Ctx) Scale(t DType, xs []unsafe.Pointer, ns []int64, alpha float32) error {
	if err := sameLen("dg_scale", len(xs), len(ns)); err != nil {
		return err
	}
	return check("dg_scale", C.dg_scale(x.c, C.dg_dtype(t), ptrs(xs), i64s(ns), C.int(len(ns)), C.float(alpha)))
}

// Axpy does ys[i] += alpha*xs[i].
func (x *Ctx) Axpy(t DType, alpha float32, xs, ys []unsafe.Pointer, ns []int64) error {
	if err := sameLen("dg_axpy", len(xs), len(ys)); err != nil {
		return err
	}
	if err := sameLen("dg_axpy", len(xs), len(ns)); err != nil {
		return err
	}
	return check("dg_axpy", C.dg_axpy(x.c, C.dg_dtype(t), C.float(alpha), ptrs(xs), ptrs(ys), i64s(ns), C.int(len(ns))))
}

// AxpyMixed does ys[i] += alpha*xs[i] with xs of dtype xt and ys of dtype
// yt, rounding each y to yt once.
func (x *Ctx) AxpyMixed(xt, yt DType, alpha float32, xs, ys []unsafe.Pointer, ns []int64) error {
	if err := sameLen("dg_axpy_mixed", len(xs), len(ys)); err != nil {
		return err
	}
	if err := sameLen("dg_axpy_mixed", len(xs), len(ns)); err != nil {
		return err
	}
	return check("dg_axpy_mixed", C.dg_axpy_mixed(x.c, C.dg_dtype(xt), C.dg_dtype(yt), C.float(alpha), ptrs(xs), ptrs(ys), i64s(ns), C.int(len(ns))))
}

// SumSquares returns the float64 sum of squares of all elements; when per is
// non-nil (len(per) == len(xs)) it also receives each tensor's sum.
func (x *Ctx) SumSquares(t DType, xs []unsafe.Pointer, ns []int64, per []float64) (float64, error) {
	if err := sameLen("dg_sumsq", len(xs), len(ns)); err != nil {
		return 0, err
	}
	var pp *C.double
	if per != nil {
		if err := sameLen("dg_sumsq", len(per), len(xs)); err != nil {
			return 0, err
		}
		if len(per) > 0 {
			pp = (*C.double)(unsafe.Pointer(&per[0]))
		}
	}
	var total C.double
	err := check("dg_sumsq", C.dg_sumsq(x.c, C.dg_dtype(t), ptrs(xs), i64s(ns), C.int(len(ns)), pp, &total))
	return float64(total), err
}

// NonFinite reports whether any element is Inf or NaN.
func (x *Ctx) NonFinite(t DType, xs []unsafe.Pointer, ns []int64) (bool, error) {
	if err := sameLen("dg_nonfinite", len(xs), len(ns)); err != nil {
		return false, err
	}
	var found C.int
	err := check("dg_nonfinite", C.dg_nonfinite(x.c, C.dg_dtype(t), ptrs(xs), i64s(ns), C.int(len(ns)), &found))
	return found != 0, err
}

// Pack copies srcs[i] (ns[i] elements) into flat at element offset offs[i].
func (x *Ctx) Pack(t DType, srcs []unsafe.Pointer, ns, offs []int64, flat unsafe.Pointer, flatN int64) error {
	if err := sameLen("dg_pack", len(srcs), len(ns)); err != nil {
		return err
	}
	if err := sameLen("dg_pack", len(srcs), len(offs)); err != nil {
		return err
	}
	return check("dg_pack", C.dg_pack(x.c, C.dg_dtype(t), ptrs(srcs), i64s(ns), i64s(offs), C.int(len(ns)), flat, C.int64_t(flatN)))
}

// Zero sets bytes[i] bytes at xs[i] to zero for every i, split over the
// pool.
func (x *Ctx) Zero(xs []unsafe.Pointer, bytes []int64) error {
	if err := sameLen("dg_zero", len(xs), len(bytes)); err != nil {
		return err
	}
	return check("dg_zero", C.dg_zero(x.c, ptrs(xs), i64s(bytes), C.int(len(xs))))
}

// Unpack copies flat at element offset offs[i] into dsts[i] (ns[i] elements).
func (x *Ctx) Unpack(t DType, flat unsafe.Pointer, flatN int64, offs, ns []int64, dsts []unsafe.Pointer) error {
	if err := sameLen("dg_unpack", len(dsts), len(ns)); err != nil {
		return err
	}
	if err := sameLen("dg_unpack", len(dsts), len(offs)); err != nil {
		return err
	}
	return check("dg_unpack", C.dg_unpack(x.c, C.dg_dtype(t), flat, C.int64_t(flatN), i64s(offs), i64s(ns), ptrs(dsts), C.int(len(ns))))
}

// ReduceInto sets dst = srcs[0] op srcs[1] op ... over n elements, in list order.
func (x *Ctx) ReduceInto(t DType, op ReduceOp, srcs []unsafe.Pointer, dst unsafe.Pointer, n int64) error {
	return check("dg_reduce_into", C.dg_reduce_into(x.c, C.dg_dtype(t), C.dg_redop(op), ptrs(srcs), C.int(len(srcs)), dst, C.int64_t(n)))
}

// ReduceBcast computes the reduction of srcs over n elements exactly as
// ReduceInto does (same bits) and stores it into every dsts[d], in one pass;
// scale != 1 then multiplies the dtype-rounded result and rounds again (the
// bits of ReduceInto followed by Scale). A dst may be the same pointer as a
// src: each element is read from every src before it is written.
func (x *Ctx) ReduceBcast(t DType, op ReduceOp, srcs, dsts []unsafe.Pointer, n int64, scale float32) error {
	return check("dg_reduce_bcast", C.dg_reduce_bcast(x.c, C.dg_dtype(t), C.dg_redop(op), ptrs(srcs), C.int(len(srcs)),
		ptrs(dsts), C.int(len(dsts)), C.int64_t(n), C.float(scale)))
}

// RoofCopy is a threaded memcpy of bytes on the pool: the roof benchmarks
// compare copying kernels with.
func (x *Ctx) RoofCopy(dst, src unsafe.Pointer, bytes int) error {
	return check("dg_roof_copy", C.dg_roof_copy(x.c, dst, src, C.int64_t(bytes)))
}

// RoofCast moves a cast's bytes on the pool without converting them:
// srcBytes read and dstBytes written, dstBytes being srcBytes, twice it or
// half of it, with the stores the casts use (non-temporal past the streaming
// threshold). Casts' benchmarks compare with it: a memcpy reads as much as
// it writes, a cast between float32 and a half does not.
func (x *Ctx) RoofCast(dst unsafe.Pointer, dstBytes int, src unsafe.Pointer, srcBytes int) error {
	return check("dg_roof_cast", C.dg_roof_cast(x.c, dst, C.int64_t(dstBytes), src, C.int64_t(srcBytes)))
}

// RoofRead is a threaded read-and-sum of bytes on the pool: the roof
// benchmarks compare reductions with. The sum is returned so the reads count.
func (x *Ctx) RoofRead(src unsafe.Pointer, bytes int) (uint64, error) {
	var s C.uint64_t
	err := check("dg_roof_read", C.dg_roof_read(x.c, src, C.int64_t(bytes), &s))
	return uint64(s), err
}

// RoofUpdate does a fused optimizer step's memory traffic on n float32
// elements without its math (p, m, v += s*g in place; 28 bytes per
// element) on the pool: the roof optimizer benchmarks compare with. s = 0
// leaves finite values unchanged, so it can run on a step's own buffers.
func (x *Ctx) RoofUpdate(p, g, m, v unsafe.Pointer, n int, s float32) error {
	return check("dg_roof_update", C.dg_roof_update(x.c, (*C.float)(p), (*C.float)(g), (*C.float)(m), (*C.float)(v),
		C.int64_t(n), C.float(s)))
}

// QuantizeInt8 quantizes n elements of x (dtype t) in groups equal groups
// into q (int8) and scales (float32, one per group): dg_quantize_i8.
func (x *Ctx) QuantizeInt8(t DType, src, q, scales unsafe.Pointer, n, groups int64) error {
	return check("dg_quantize_i8", C.dg_quantize_i8(x.c, C.dg_dtype(t), src, (*C.int8_t)(q), (*C.float)(scales),
		C.int64_t(n), C.int64_t(groups)))
}

// DequantizeInt8 writes n elements of dtype t into y from q (int8) and
// scales (float32, groups of them): dg_dequantize_i8.
func (x *Ctx) DequantizeInt8(t DType, q, scales, y unsafe.Pointer, n, groups int64) error {
	return check("dg_dequantize_i8", C.dg_dequantize_i8(x.c, C.dg_dtype(t), (*C.int8_t)(q), (*C.float)(scales), y,
		C.int64_t(n), C.int64_t(groups)))
}
