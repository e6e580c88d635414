//go:build cuda

package nccl

/*
#include "shim.h"
*/
import "C"

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/cuda"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Split's records, one per rank, all-gathered over the parent so every
// rank knows the new groups' members and names (NCCL tells neither):
// color, key and name length as int64, then the name.
const (
	recBytes = 128
	maxName  = recBytes - 24
)

type splitRec struct {
	color, key, rank int
	name             string
}

// Split is ncclCommSplit, after an all-gather of every rank's (color, key,
// name) over this group. The new group gets its own stream unless this one
// borrowed Options.Stream, which it then shares.
func (c *ncclComm) Split(ctx context.Context, color, key int, name string) (comm.Comm, error) {
	if color < 0 && color != comm.NoColor || len(name) > maxName {
		err := c.errorf(comm.OpSplit, fmt.Errorf("%w: color %d (want >= 0 or NoColor), name of %d bytes (at most %d)",
			comm.ErrInvalid, color, len(name), maxName))
		c.mu.Lock()
		c.breakLocked(err)
		c.mu.Unlock()
		return nil, err
	}
	recs, err := c.exchange(ctx, color, key, name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if err := c.unusableLocked(); err != nil {
		c.mu.Unlock()
		return nil, c.errorf(comm.OpSplit, err)
	}
	deadline := c.deadline(ctx)
	var h C.ncclComm_t
	var cuerr C.int
	r := C.dg_nccl_split(C.int(c.dev), c.h, C.int(color), C.int(key), &h, &cuerr)
	err = check("ncclCommSplit", c.h, r, cuerr)
	if err == nil {
		hs := []C.ncclComm_t{c.h}
		if h != nil {
			hs = append(hs, h)
		}
		err = settle(ctx, deadline, "ncclCommSplit", hs...)
	}
	c.nsplit++
	nsplit := c.nsplit
	if err != nil {
		if h != nil {
			C.dg_nccl_abort(C.int(c.dev), h)
		}
		e := c.errorf(comm.OpSplit, err)
		c.breakLocked(e)
		c.mu.Unlock()
		return nil, e
	}
	c.mu.Unlock()
	if color == comm.NoColor {
		return nil, nil
	}
	return c.child(h, recs, color, nsplit)
}

// exchange all-gathers the split records over c.
func (c *ncclComm) exchange(ctx context.Context, color, key int, name string) ([]splitRec, error) {
	fail := func(err error) ([]splitRec, error) {
		e := c.errorf(comm.OpSplit, fmt.Errorf("%w: %w", comm.ErrAborted, err))
		c.mu.Lock()
		c.breakLocked(e)
		c.mu.Unlock()
		return nil, e
	}
	host, err := tensor.Empty(tensor.Uint8, c.size*recBytes)
	if err != nil {
		return fail(err)
	}
	dev, err := cuda.Malloc(c.dev, tensor.Uint8, c.size*recBytes)
	if err != nil {
		return fail(err)
	}
	defer dev.Storage().Free()
	all, err := host.RawBytes()
	if err != nil {
		return fail(err)
	}
	mine := all[c.rank*recBytes : (c.rank+1)*recBytes]
	binary.LittleEndian.PutUint64(mine[0:], uint64(int64(color)))
	binary.LittleEndian.PutUint64(mine[8:], uint64(int64(key)))
	binary.LittleEndian.PutUint64(mine[16:], uint64(len(name)))
	copy(mine[24:], name)
	// The copies run on the legacy default stream, which our blocking
	// stream is ordered with.
	if err := cuda.CopyToDevice(dev, host); err != nil {
		return fail(err)
	}
	chunk, err := dev.Slice(c.rank*recBytes, recBytes)
	if err != nil {
		return fail(err)
	}
	if err := c.AllGather(ctx, dev, chunk); err != nil {
		return nil, err
	}
	if err := cuda.CopyToHost(host, dev); err != nil {
		return fail(err)
	}
	recs := make([]splitRec, c.size)
	for r := range recs {
		b := all[r*recBytes : (r+1)*recBytes]
		n := min(int(binary.LittleEndian.Uint64(b[16:])), maxName)
		recs[r] = splitRec{color: int(int64(binary.LittleEndian.Uint64(b[0:]))),
			key: int(int64(binary.LittleEndian.Uint64(b[8:]))), rank: r, name: string(b[24 : 24+n])}
	}
	return recs, nil
}

// child wraps the new communicator h: members ordered by key then rank,
// as NCCL orders them, and the lowest-key member's name.
func (c *ncclComm) child(h C.ncclComm_t, recs []splitRec, color, nsplit int) (comm.Comm, error) {
	var group []splitRec
	for _, r := range recs {
		if r.color == color {
			group = append(group, r)
		}
	}
	slices.SortStableFunc(group, func(a, b splitRec) int { return cmp.Compare(a.key, b.key) })
	name := group[0].name
	if name == "" {
		name = fmt.Sprintf("%s/split%d:%d", c.name, nsplit, color)
	}
	n := &ncclComm{dev: c.dev, size: len(group), name: name, timeout: c.timeout, members: make([]int, len(group)), compute: c.compute}
	for i, r := range group {
		n.members[i] = c.members[r.rank]
		if r.rank == c.rank {
			n.rank = i
		}
	}
	var borrowed *cuda.Stream
	if !c.ownStream {
		borrowed = c.stream
	}
	if err := n.setup(borrowed); err != nil {
		C.dg_nccl_abort(C.int(c.dev), h)
		return nil, n.errorf(comm.OpSplit, err)
	}
	n.h = h
	return n, nil
}
