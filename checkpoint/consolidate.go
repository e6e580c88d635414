package checkpoint

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/deepgo-ml/deepgo/checkpoint/vfs"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// Consolidate writes the checkpoint's parameters as full float32 tensors
// to one safetensors file (DeepSpeed's zero_to_fp32): each ParamRef of
// the manifest is assembled from every rank's piece of its source and
// converted to float32. A checkpoint without Params exports every tensor
// instead (sharded ones as flat vectors). It reads and verifies the data
// files it needs, and writes out atomically (temporary file, sync, rename).
func (c *Checkpoint) Consolidate(ctx context.Context, fsys vfs.FS, out string) error {
	if fsys == nil {
		fsys = vfs.OS
	}
	refs := c.Manifest.Params
	if len(refs) == 0 {
		for _, n := range c.Names() {
			g := c.index[n]
			refs = append(refs, ParamRef{Name: n, Shape: g.Shape, Source: n})
		}
	}
	var named []safetensors.Named
	defer func() {
		for _, n := range named {
			n.Tensor.Free()
		}
	}()
	for _, p := range refs {
		t, err := c.ReadParam(ctx, p)
		if err != nil {
			return err
		}
		named = append(named, safetensors.Named{Name: p.Name, Tensor: t})
	}
	meta := map[string]string{"format": "pt", "deepgo.tag": c.Tag, "deepgo.step": fmt.Sprint(c.Manifest.Step)}
	if err := WriteTensors(fsys, out, named, meta); err != nil {
		return fmt.Errorf("checkpoint: consolidate: %w", err)
	}
	return nil
}

// WriteTensors writes ts as one safetensors file out, atomically: a
// temporary file beside it, synced, renamed over out, and the directory
// synced, so that a crash leaves either the old out or the new one whole.
// A nil fsys is the operating system's.
func WriteTensors(fsys vfs.FS, out string, ts []safetensors.Named, meta map[string]string) (err error) {
	if fsys == nil {
		fsys = vfs.OS
	}
	tmp := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".tmp")
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			fsys.Remove(tmp)
		}
	}()
	if _, err = safetensors.Write(f, ts, meta); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = fsys.Rename(tmp, out); err != nil {
		return err
	}
	return syncDir(fsys, filepath.Dir(out))
}

// ReadParam assembles parameter p (a ParamRef of the manifest, or one
// WithSources made from it) as a new float32 tensor of its full shape,
// converting from the saved dtype: a parameter saved as tensor-parallel
// shards is put back together from every shard, whatever degree saved
// it. The caller frees the tensor.
func (c *Checkpoint) ReadParam(ctx context.Context, p ParamRef) (*tensor.Tensor, error) {
	out, err := tensor.Empty(tensor.Float32, p.Shape...)
	if err != nil {
		return nil, err
	}
	full, _ := out.Float32s()
	pieces := p.Pieces()
	n := len(pieces)
	var l model.TPLayout
	if p.Split != nil {
		l = p.Split.Layout()
	}
	part := make([]float32, p.Numel()/int64(n))
	for r, piece := range pieces {
		if err := c.readPiece(ctx, piece, part); err != nil {
			out.Free()
			return nil, fmt.Errorf("checkpoint: parameter %q: %w", p.Name, err)
		}
		l.Runs(p.Shape, r, n, func(fo, lo, length int) { copy(full[fo:fo+length], part[lo:lo+length]) })
	}
	return out, nil
}

// readPiece reads len(dst) elements of piece's source from its offset,
// converted to float32.
func (c *Checkpoint) readPiece(ctx context.Context, piece ShardRef, dst []float32) error {
	g, ok := c.index[piece.Source]
	if !ok {
		return fmt.Errorf("no tensor %q in the checkpoint", piece.Source)
	}
	dt, err := safetensors.ParseDType(g.DType)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", piece.Source, err)
	}
	raw, err := tensor.Empty(dt, len(dst))
	if err != nil {
		return err
	}
	defer raw.Free()
	if err := c.ReadRange(ctx, piece.Source, piece.Offset, raw); err != nil {
		return err
	}
	return toFloat32(dst, raw)
}

// toFloat32 converts src (any dtype) elementwise into dst.
func toFloat32(dst []float32, src *tensor.Tensor) error {
	switch src.DType() {
	case tensor.Float32:
		s, _ := src.Float32s()
		copy(dst, s)
	case tensor.Float16, tensor.BFloat16:
		s, _ := src.Uint16s()
		f := tensor.Float16ToFloat32
		if src.DType() == tensor.BFloat16 {
			f = tensor.BFloat16ToFloat32
		}
		for i, v := range s {
			dst[i] = f(v)
		}
	case tensor.Float64:
		s, _ := src.Float64s()
		for i, v := range s {
			dst[i] = float32(v)
		}
	case tensor.Int32:
		s, _ := src.Int32s()
		for i, v := range s {
			dst[i] = float32(v)
		}
	case tensor.Int64:
		s, _ := src.Int64s()
		for i, v := range s {
			dst[i] = float32(v)
		}
	case tensor.Uint8, tensor.Bool:
		s, _ := src.RawBytes()
		for i, v := range s {
			dst[i] = float32(v)
		}
	default:
		return fmt.Errorf("dtype %v cannot be converted to float32", src.DType())
	}
	return nil
}
