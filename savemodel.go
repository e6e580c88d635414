package deepgo

// SaveModel: the trained weights for inference, whole, in one file
// (DeepSpeed's save_16bit_model), as opposed to Save's resumable sharded
// checkpoint.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/checkpoint/safetensors"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/tensor"
)

// DefaultModelFile is the file SaveModel writes when SaveModelOptions.Name
// is empty: Hugging Face's name for a single-file safetensors model.
const DefaultModelFile = "model.safetensors"

// ErrModelNotGathered is wrapped by SaveModel's error at ZeRO stage 3
// when zero_optimization.stage3_gather_16bit_weights_on_model_save is
// false: DeepSpeed's save_16bit_model then saves nothing (and returns
// False), since consolidating a partitioned model costs time and memory.
var ErrModelNotGathered = errors.New("stage3_gather_16bit_weights_on_model_save is false")

// SaveModelOptions are SaveModel's choices.
type SaveModelOptions struct {
	// Name is the file written in the directory (default
	// DefaultModelFile): a plain file name ending in ".safetensors" (the
	// file is safetensors, which Hugging Face's loaders tell by that
	// suffix; DeepSpeed's default pytorch_model.bin is a torch pickle).
	Name string
	// ExcludeFrozen leaves the frozen parameters (model.Param.Frozen) out
	// of the file, as DeepSpeed's save_16bit_model(exclude_frozen_parameters=True):
	// an adapter's weights alone.
	ExcludeFrozen bool
}

// file is the file name opts asks for in dir, checked.
func (o SaveModelOptions) file(dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("dir is empty: want the directory to write %s in", DefaultModelFile)
	}
	name := o.Name
	if name == "" {
		return DefaultModelFile, nil
	}
	if strings.ContainsAny(name, `/\`) || !strings.HasSuffix(name, ".safetensors") || strings.TrimSpace(strings.TrimSuffix(name, ".safetensors")) == "" {
		return "", fmt.Errorf("SaveModelOptions.Name %q: want a plain file name (no directory part) ending in .safetensors, such as %q", name, DefaultModelFile)
	}
	return name, nil
}

// modelWeights is what SaveModel writes: every parameter of the whole
// model once, in module order, in the dtype the model computes in.
type modelWeights struct {
	cfg    *config.Config
	dtype  tensor.DType
	params []*model.Param // the whole model's, deduplicated by name, in order
	tp     comm.Comm      // the tensor-parallel group, nil without TP
	write  bool           // this rank writes the file
	step   int
}

// CheckSaveModel is SaveModel's verdict on cfg alone, for a trainer to ask
// before training: at ZeRO stage 3 without
// stage3_gather_16bit_weights_on_model_save, an error wrapping
// ErrModelNotGathered; nil otherwise.
func CheckSaveModel(cfg *config.Config) error {
	if cfg.ZeroOptimization.Stage == 3 && !cfg.ZeroOptimization.Stage3Gather16bitWeightsOnModelSave {
		return fmt.Errorf("zero_optimization.%w: at ZeRO stage 3 the weights are partitioned, and the whole model is written only when it is true, as DeepSpeed's save_16bit_model saves nothing otherwise (set it true, or save checkpoints and consolidate one with deepgo ckpt consolidate)", ErrModelNotGathered)
	}
	return nil
}

// check refuses, before any collective, what CheckSaveModel refuses and a
// parameter name safetensors reserves.
func (w modelWeights) check() error {
	if err := CheckSaveModel(w.cfg); err != nil {
		return err
	}
	for _, p := range w.params {
		if p.Name == "__metadata__" {
			return fmt.Errorf("parameter %q: safetensors reserves the name for the file's metadata; rename the parameter (model.Param.Aliases keeps old checkpoints loading)", p.Name)
		}
	}
	return nil
}

// save writes vals (this rank's fp32 values keyed by parameter name, TP
// shards under tensor parallelism) as dir/name: the shards are gathered
// over the TP group (a collective every TP rank joins), cast to w.dtype
// and written by the rank w.write names.
func (w modelWeights) save(ctx context.Context, vals map[string][]float32, dir, name string) error {
	var named []safetensors.Named
	defer func() {
		for _, n := range named {
			n.Tensor.Free()
		}
	}()
	n := 1
	if w.tp != nil {
		n = w.tp.Size()
	}
	// every rank joins every gather before the writer may stop at an
	// error of its own
	whole := make([][]float32, len(w.params))
	for i, p := range w.params {
		v, ok := vals[p.Name]
		if !ok {
			return fmt.Errorf("no value for parameter %q", p.Name)
		}
		if p.Parallel.Split && n > 1 {
			var err error
			if v, err = unshard(ctx, w.tp, p, tpFullShape(p, n), v); err != nil {
				return err
			}
		}
		whole[i] = v
	}
	if !w.write {
		return nil
	}
	for i, p := range w.params {
		t, err := castHost(whole[i], w.dtype, tpFullShape(p, n))
		if err != nil {
			return err
		}
		named = append(named, safetensors.Named{Name: p.Name, Tensor: t})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	meta := map[string]string{"format": "pt", "deepgo.step": fmt.Sprint(w.step)}
	return checkpoint.WriteTensors(nil, filepath.Join(dir, name), named, meta)
}

// unshard gathers split parameter p's shards (v is this rank's) over tp
// and assembles the full tensor of shape full.
func unshard(ctx context.Context, tp comm.Comm, p *model.Param, full []int, v []float32) ([]float32, error) {
	n := tp.Size()
	src, err := tensor.FromFloat32(v, len(v))
	if err != nil {
		return nil, err
	}
	defer src.Free()
	all, err := tensor.Empty(tensor.Float32, n*len(v))
	if err != nil {
		return nil, err
	}
	defer all.Free()
	if err := comm.AllGatherHost(ctx, tp, all, src); err != nil {
		return nil, fmt.Errorf("gathering the tensor-parallel shards of %q: %w", p.Name, err)
	}
	got, _ := all.Float32s()
	out := make([]float32, n*len(v))
	for r := range n {
		part := got[r*len(v) : (r+1)*len(v)]
		p.Parallel.Runs(full, r, n, func(fo, lo, length int) { copy(out[fo:fo+length], part[lo:lo+length]) })
	}
	return out, nil
}

// castHost returns v as a new host tensor of dtype dt and shape shape,
// rounded to nearest even as the engines' casts round.
func castHost(v []float32, dt tensor.DType, shape []int) (*tensor.Tensor, error) {
	t, err := tensor.Empty(dt, shape...)
	if err != nil {
		return nil, err
	}
	switch dt {
	case tensor.Float32:
		d, _ := t.Float32s()
		copy(d, v)
	case tensor.Float16, tensor.BFloat16:
		d, _ := t.Uint16s()
		f := tensor.Float32ToFloat16
		if dt == tensor.BFloat16 {
			f = tensor.Float32ToBFloat16
		}
		for i, x := range v {
			d[i] = f(x)
		}
	default:
		t.Free()
		return nil, fmt.Errorf("model dtype %v: want float32, float16 or bfloat16", dt)
	}
	return t, nil
}

// wholeModel lists mods' parameters once each (a tied weight appears in
// two modules), in module order; with noFrozen, the trainable ones only.
func wholeModel(mods []model.Module, noFrozen bool) []*model.Param {
	var out []*model.Param
	seen := map[string]bool{}
	for _, m := range mods {
		for _, p := range m.Params() {
			if !seen[p.Name] && !(noFrozen && p.Frozen) {
				seen[p.Name] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// SaveModel writes the model's weights, whole, to one safetensors file
// dir/opts.Name on the first rank, for inference or export: DeepSpeed's
// save_16bit_model. See Trainer.SaveModel.
func (e *Engine) SaveModel(ctx context.Context, dir string, opts SaveModelOptions) error {
	if err := e.usable(ctx, "SaveModel"); err != nil {
		return err
	}
	name, err := opts.file(dir)
	if err != nil {
		return fmt.Errorf("deepgo: SaveModel: %w", err)
	}
	tpRank, _ := e.tpDegree()
	w := modelWeights{cfg: e.cfg, dtype: e.z.Config().ModelDType, params: wholeModel(e.mods, opts.ExcludeFrozen), tp: e.tp,
		write: e.c.Rank() == 0 && tpRank == 0, step: e.globalSteps}
	if err := w.check(); err != nil {
		return fmt.Errorf("deepgo: SaveModel: %w", err)
	}
	vals, err := e.Parameters(ctx)
	if err := e.agreeTP(ctx, "SaveModel", err); err != nil { // every rank gathers, or none
		return err
	}
	if err = w.save(ctx, vals, dir, name); err != nil {
		err = fmt.Errorf("deepgo: SaveModel: %w", err)
	}
	return e.agreeTP(ctx, "SaveModel", err)
}

// SaveModel writes the whole model's weights to one safetensors file
// dir/opts.Name on the first rank of the world, as Engine.SaveModel; every
// rank of every stage must call it.
func (e *PipeEngine) SaveModel(ctx context.Context, dir string, opts SaveModelOptions) error {
	if err := e.openCheck("SaveModel"); err != nil {
		return err
	}
	name, err := opts.file(dir)
	if err != nil {
		return fmt.Errorf("deepgo: pipeline engine: SaveModel: %w", err)
	}
	w := modelWeights{cfg: e.cfg, dtype: e.z.Config().ModelDType, params: wholeModel(e.net.Modules(), opts.ExcludeFrozen), tp: e.tp,
		write: e.world.Rank() == 0, step: e.globalSteps}
	if err := w.check(); err != nil {
		return fmt.Errorf("deepgo: pipeline engine: SaveModel: %w", err)
	}
	vals, err := e.Parameters(ctx)
	if err := agreeOn(ctx, e.world, "SaveModel", err); err != nil { // every rank gathers, or none
		return err
	}
	if err = w.save(ctx, vals, dir, name); err != nil {
		err = fmt.Errorf("deepgo: pipeline engine: SaveModel: %w", err)
	}
	return agreeOn(ctx, e.world, "SaveModel", err)
}
