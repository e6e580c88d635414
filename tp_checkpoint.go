package deepgo

// Checkpoints under tensor parallelism keep the TP shards, as Megatron's
// mp_rank_XX files do: each TP rank's ZeRO units are saved as tensors of
// their own (fp32/mp_rank_01/unit3, optim/exp_avg/mp_rank_01/unit3, ...),
// sharded over the data-parallel ranks as without TP, and the manifest
// places each split parameter's full value across them
// (checkpoint.ParamRef.Split: dim, parts and one shard per TP rank), each
// replicated one in TP rank 0's units. Load assembles a parameter's full
// value from the shards of whatever degree saved it and cuts this rank's
// shard at its own degree (model.TPLayout.Runs), masters and optimizer
// state alike, so a checkpoint loads at any TP degree, data-parallel world
// and ZeRO stage 0-2.
//
// The checkpoint package writes one file set per rank of one group, the
// data-parallel group: so TP rank 0 of each data rank collects the other
// TP ranks' pieces (point to point, one tensor at a time) and saves them
// with its own, and the TP group then agrees on the outcome. That holds
// TP-degree copies of a rank's partition on TP rank 0 while it saves: the
// size of the partition without TP, the memory a checkpoint without TP
// needs anyway.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// tpDegree is this rank's TP rank and the TP degree (0, 1 without TP).
func (e *Engine) tpDegree() (rank, n int) {
	if e.tp == nil {
		return 0, 1
	}
	return e.tp.Rank(), e.tp.Size()
}

// tpTensorName is TP rank t's copy of saved tensor name:
// "fp32/unit3" → "fp32/mp_rank_01/unit3".
func tpTensorName(name string, t int) string {
	i := strings.LastIndex(name, "/")
	return fmt.Sprintf("%smp_rank_%02d/%s", name[:i+1], t, name[i+1:])
}

// fullShape is p's shape before tensor parallelism split it.
func (e *Engine) fullShape(p *model.Param) []int {
	_, n := e.tpDegree()
	return tpFullShape(p, n)
}

// tpFullShape is p's shape before tensor parallelism over n ranks split it.
func tpFullShape(p *model.Param, n int) []int {
	s := slices.Clone(p.Shape)
	if p.Parallel.Split && n > 1 {
		s[p.Parallel.Dim] *= n
	}
	return s
}

// tpSplitRef is the manifest entry of split parameter p saved as n TP
// shards, shard t at offset off of tensor source(t).
func tpSplitRef(p *model.Param, n int, source func(t int) string, off int64) checkpoint.ParamRef {
	sp := &checkpoint.TPSplit{Dim: p.Parallel.Dim, Parts: p.Parallel.Parts}
	for t := range n {
		sp.Shards = append(sp.Shards, checkpoint.ShardRef{Source: source(t), Offset: off})
	}
	return checkpoint.ParamRef{Name: p.Name, Shape: tpFullShape(p, n), Split: sp}
}

// agreeTP is agree over the data-parallel group and then the TP group:
// every rank of the world gets nil only if every rank succeeded.
func (e *Engine) agreeTP(ctx context.Context, op string, err error) error {
	err = e.agree(ctx, op, err)
	if _, n := e.tpDegree(); n == 1 {
		return err
	}
	if aerr := comm.Agree(ctx, e.tp, op+" (tensor-parallel group)", err); err == nil && aerr != nil {
		return fmt.Errorf("deepgo: %w", aerr)
	}
	return err
}

// tpAgreeTag extends Load's tag check (err: this rank's data group's
// verdict) to the TP group, so that no TP rank restores another
// checkpoint than the rest, and spreads any failure to every rank: every
// TP group meets every data group. A collective over both groups.
func (e *Engine) tpAgreeTag(ctx context.Context, tag string, err error) error {
	if _, n := e.tpDegree(); n == 1 {
		return err
	}
	if aerr := comm.Agree(ctx, e.tp, "Load (tensor-parallel group)", err); err == nil && aerr != nil {
		err = fmt.Errorf("deepgo: %w", aerr)
	}
	if err == nil { // the whole TP group or none of it gets here
		err = checkpoint.AgreeTag(ctx, e.tp, tag)
	}
	return e.agreeTP(ctx, "Load", err)
}

// tpCollect turns every TP rank's st into TP rank 0's, which holds every
// TP rank's tensors under tpTensorName and the manifest's parameter map
// over them. The other ranks send theirs and keep st as it is (they do
// not save). A collective over the TP group; the received tensors live
// until releaseStaged.
func (e *Engine) tpCollect(ctx context.Context, st *checkpoint.State) error {
	rank, n := e.tpDegree()
	if n == 1 {
		return nil
	}
	if rank != 0 {
		for _, en := range st.Tensors {
			// host copies: staged over a device's collectives (NCCL's)
			if err := comm.SendHost(ctx, e.tp, en.Data, 0); err != nil {
				return fmt.Errorf("%s to tensor-parallel rank 0: %w", en.Name, err)
			}
		}
		return nil
	}
	var all []checkpoint.Entry
	for _, en := range st.Tensors {
		own := en
		own.Name = tpTensorName(en.Name, 0)
		all = append(all, own)
		for t := 1; t < n; t++ {
			buf, err := tensor.Empty(en.Data.DType(), en.Data.Numel())
			if err != nil {
				return err
			}
			e.staged = append(e.staged, func() { buf.Free() })
			if err := comm.RecvHost(ctx, e.tp, buf, t); err != nil {
				return fmt.Errorf("%s from tensor-parallel rank %d: %w", en.Name, t, err)
			}
			got := en
			got.Name, got.Data = tpTensorName(en.Name, t), buf
			all = append(all, got)
		}
	}
	st.Tensors = all
	st.Topology["model"] = n
	params := st.Params[:0:0]
	i := 0
	for _, ps := range e.params {
		for _, p := range ps {
			params = append(params, tpParamRef(p, st.Params[i], n))
			i++
		}
	}
	st.Params = append(params, e.tpFrozenRefs(st.Params[i:], n)...)
	return nil
}

// tpParamRef turns p's parameter map ref as one TP rank saves it into TP
// rank 0's over n TP ranks' tensors: a split parameter's shards are the
// TP ranks' copies of ref's tensor, a replicated one is TP rank 0's.
func tpParamRef(p *model.Param, ref checkpoint.ParamRef, n int) checkpoint.ParamRef {
	if !p.Parallel.Split {
		ref.Source = tpTensorName(ref.Source, 0)
		return ref
	}
	return tpSplitRef(p, n, func(t int) string { return tpTensorName(ref.Source, t) }, ref.Offset)
}

// tpSave is Save's write under TP: TP rank 0 collects and saves, and the
// TP group agrees on the outcome.
func (e *Engine) tpSave(ctx context.Context, o checkpoint.Options, st *checkpoint.State) error {
	err := e.agreeTP(ctx, "Save", e.tpCollect(ctx, st))
	if err != nil {
		return err
	}
	if rank, _ := e.tpDegree(); rank == 0 {
		_, err = checkpoint.Save(ctx, o, st)
	}
	if aerr := comm.Agree(ctx, e.tp, "Save (tensor-parallel group)", err); err == nil && aerr != nil {
		err = aerr
	}
	if err != nil {
		return fmt.Errorf("deepgo: Save: %w", err)
	}
	return nil
}

// readSlot fills dst with elements [off, off+dst.Numel()) of parameter
// p's values (this rank's TP shard) from ref (see readTPSlot).
func (e *Engine) readSlot(ctx context.Context, ck *checkpoint.Checkpoint, ref checkpoint.ParamRef, p *model.Param, off int, dst *tensor.Tensor) error {
	rank, n := e.tpDegree()
	return readTPSlot(ctx, ck, ref, p, rank, n, off, dst)
}

// readTPSlot fills dst with elements [off, off+dst.Numel()) of parameter
// p's values as TP rank rank of n holds them, from ref, a checkpoint's
// parameter whose pieces are already named for the tensor read (masters
// or an optimizer state). Without TP on either side it reads the range
// alone; otherwise it assembles the full value from the shards of
// whatever degree saved it and cuts this rank's shard.
func readTPSlot(ctx context.Context, ck *checkpoint.Checkpoint, ref checkpoint.ParamRef, p *model.Param, rank, n, off int, dst *tensor.Tensor) error {
	if ref.Split == nil && (!p.Parallel.Split || n == 1) {
		return ck.ReadRange(ctx, ref.Source, ref.Offset+int64(off), dst)
	}
	full, err := ck.ReadParam(ctx, ref)
	if err != nil {
		return err
	}
	defer full.Free()
	fv, _ := full.Float32s()
	d, err := dst.Float32s()
	if err != nil {
		return err
	}
	end := off + len(d)
	p.Parallel.Runs(full.Shape(), rank, n, func(fo, lo, length int) {
		a, b := max(lo, off), min(lo+length, end)
		if a < b {
			copy(d[a-off:b-off], fv[fo+a-lo:fo+b-lo])
		}
	})
	return nil
}

// verifyTPReplicated checks that the parameters TP replicates (LayerNorms,
// position embeddings, row-parallel biases) are the same on every rank of
// the TP group, a collective over it.
func (e *Engine) verifyTPReplicated(ctx context.Context) error {
	if _, n := e.tpDegree(); n == 1 {
		return nil
	}
	idx, ts := e.z.ReplicatedParams()
	var rep []checkpoint.Named
	var err error
	for i, t := range ts {
		p := e.params[idx[i][0]][idx[i][1]]
		if p.Parallel.Split {
			continue
		}
		var h *tensor.Tensor
		if h, err = e.hostCopy(t); err != nil {
			break
		}
		rep = append(rep, checkpoint.Named{Name: p.Name, Tensor: h})
	}
	// a rank whose host copies failed still meets its TP peers here
	if err := agreeOn(ctx, e.tp, "Load (tensor-parallel group)", err); err != nil {
		return err
	}
	if err := checkpoint.VerifyReplicated(ctx, e.tp, rep); err != nil {
		return fmt.Errorf("over the tensor-parallel group (ranks are TP ranks): %w", err)
	}
	return nil
}
