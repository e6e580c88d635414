package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/checkpoint"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
)

// trainState is what deepgo train keeps in a checkpoint beside the engine's
// state (the engine's client_state): where each rank's sampler stands, and
// over how many training windows (the sampler's shuffle depends on it:
// --data's hold-out for --eval-interval changes it).
type trainState struct {
	Sampler data.Position `json:"sampler"`
	// Windows is the sampler's N; 0 in checkpoints written before it was
	// recorded (not checked then).
	Windows int `json:"windows,omitempty"`
}

// resumeSource is the checkpoint a run resumes from.
type resumeSource struct {
	// dir is the save directory to load from; "" starts the run fresh.
	dir string
	// tag is the checkpoint to load in dir; "" for the one its latest
	// file names.
	tag string
	// why, when checkpoint.load_path is set but save_dir's latest is
	// loaded instead, is the line saying so.
	why string
	// seed is true when the checkpoint is checkpoint.load_path's, not
	// save_dir's own.
	seed bool
}

// resumeFrom is the checkpoint a run resumes from. save_dir's latest
// checkpoint comes first: once a run has saved there, every restart
// (deepgo launch --max_restarts, a rerun with a larger --steps) resumes
// from its own newest checkpoint, and checkpoint.load_path, which only
// seeds a run whose save_dir has none, is set aside with a line saying
// why. Without a checkpoint in save_dir, checkpoint.load_path must name
// something to load: a save directory with a latest file, or one
// checkpoint's folder inside one (DIR/global_step5, the folder with its
// manifest.json); it may be save_dir before the first save. Anything else
// is an error naming checkpoint.load_path, where DeepSpeed would start
// fresh after a warning. Neither: the run starts fresh.
func resumeFrom(cfg *config.Config) (resumeSource, error) {
	save := cfg.Checkpoint.SaveDir
	lp := ""
	if cfg.Checkpoint.LoadPath != nil {
		lp = *cfg.Checkpoint.LoadPath
	}
	if save != "" {
		if _, err := os.Stat(filepath.Join(save, "latest")); !errors.Is(err, fs.ErrNotExist) {
			src := resumeSource{dir: save}
			if lp != "" && filepath.Clean(lp) != filepath.Clean(save) {
				latest := "its latest file is unreadable"
				if tag, err := checkpoint.ReadLatest(nil, save); err == nil {
					latest = tag
				}
				src.why = fmt.Sprintf("resuming from save_dir's latest (%s), not checkpoint.load_path %s: save_dir holds this run's newest checkpoints, and load_path only seeds a run whose save_dir has none", latest, lp)
			}
			return src, nil
		}
	}
	if lp == "" {
		return resumeSource{}, nil
	}
	const want = "want a checkpoint save directory with a latest file (an earlier run's save_dir) or one checkpoint's folder inside it (e.g. DIR/global_step5, with its manifest.json)"
	fi, err := os.Stat(lp)
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist) && filepath.Clean(lp) == filepath.Clean(save):
		return resumeSource{}, nil // save_dir, before the first save
	case err != nil:
		return resumeSource{}, fmt.Errorf("checkpoint.load_path %q: %w; %s", lp, err, want)
	case !fi.IsDir():
		return resumeSource{}, fmt.Errorf("checkpoint.load_path %q: not a directory; %s", lp, want)
	}
	if _, err := os.Stat(filepath.Join(lp, "latest")); err == nil {
		return resumeSource{dir: lp, seed: true}, nil
	}
	if _, err := os.Stat(filepath.Join(lp, "manifest.json")); err == nil {
		clean := filepath.Clean(lp)
		return resumeSource{dir: filepath.Dir(clean), tag: filepath.Base(clean), seed: true}, nil
	}
	if filepath.Clean(lp) == filepath.Clean(save) {
		return resumeSource{}, nil // save_dir, before the first save
	}
	return resumeSource{}, fmt.Errorf("checkpoint.load_path %q: no latest file and no manifest.json in it: no checkpoint to resume from; %s", lp, want)
}

// resumed is what resumer.resume did.
type resumed struct {
	// first is the first step still to run (1 for a fresh run).
	first int
	// dir is the save directory loaded from; "" for a fresh run.
	dir string
	// why says why save_dir was loaded rather than checkpoint.load_path
	// (resumeSource.why); note, after a fallback or a load_path tag inside
	// save_dir, what was loaded and what changed.
	why, note string
	// loadNotes are the Load's own (deepgo.LoadResult.Notes): what it did
	// not restore as saved.
	loadNotes []string
}

// resumer resumes a run. The in-process ranks share one, so that when the
// latest checkpoint will not load the save directory is verified once and
// every rank takes the same decision from the same verdicts.
type resumer struct {
	// fallback (--resume-fallback) resumes from the newest checkpoint that
	// verifies when the latest one is damaged; without it that is an error
	// listing them.
	fallback bool
	// moduleOnly (--load-module-only) loads checkpoint.load_path's
	// parameters alone and trains from step 1.
	moduleOnly bool

	once     sync.Once
	verdicts []checkpoint.Verdict
	listErr  error
	latest   string // the tag latest names; "" when latest is unreadable

	pointOnce sync.Once
	pointErr  error
}

// resume loads the checkpoint resumeFrom names when there is one (an
// error when checkpoint.load_path names none), restores the sampler, and
// says what it did: the first step still to run, where it loaded from and
// why, and after a fallback what was skipped and what was loaded.
func (rs *resumer) resume(ctx context.Context, cfg *config.Config, e deepgo.Trainer, s *data.DistributedSampler) (resumed, error) {
	src, err := resumeFrom(cfg)
	if err != nil || src.dir == "" {
		return resumed{first: 1}, err
	}
	dir, tag := src.dir, src.tag
	if rs.moduleOnly && src.seed {
		return rs.seedModule(ctx, cfg, e, src)
	}
	note := ""
	res, err := e.Load(ctx, dir, deepgo.LoadOptions{Tag: tag})
	if errors.Is(err, deepgo.ErrSavedFrozen) {
		err = fmt.Errorf("%w\n(deepgo train: resume with the --freeze the checkpoint was saved with, or train in a new save_dir seeded from it by checkpoint.load_path with --load-module-only)", err)
	}
	if err != nil && tag != "" {
		return resumed{}, fmt.Errorf("checkpoint.load_path %q: %w", *cfg.Checkpoint.LoadPath, err)
	}
	if err == nil && tag != "" && filepath.Clean(dir) == filepath.Clean(cfg.Checkpoint.SaveDir) {
		// Saves go on in dir from the loaded tag's step: latest must name
		// it, or the save reaching the step latest names would refuse that
		// tag (and a restart would skip back to it).
		rs.pointOnce.Do(func() { rs.pointErr = checkpoint.SetLatest(nil, dir, tag) })
		if rs.pointErr != nil {
			return resumed{}, fmt.Errorf("checkpoint.load_path %q: %w", *cfg.Checkpoint.LoadPath, rs.pointErr)
		}
		note = fmt.Sprintf("checkpoint.load_path: resumed from %s inside save_dir, which had no latest file; latest now names it, and later checkpoints there are replaced as the run reaches their steps", tag)
	}
	if err != nil {
		good, damaged, ferr := rs.fallbackTag(ctx, dir, err)
		if ferr != nil {
			return resumed{}, ferr
		}
		if res, err = e.Load(ctx, dir, deepgo.LoadOptions{Tag: good.Tag}); err != nil {
			return resumed{}, fmt.Errorf("resume from %s, falling back to %s: %w", dir, good.Tag, err)
		}
		note = fmt.Sprintf("--resume-fallback: %s; resumed from %s (step %d), the newest checkpoint that verifies",
			damaged, good.Tag, good.Step)
		// Saves go on in dir: latest must name what was loaded, or the
		// save reaching the damaged checkpoint's step would refuse its tag.
		if filepath.Clean(dir) == filepath.Clean(cfg.Checkpoint.SaveDir) {
			rs.pointOnce.Do(func() { rs.pointErr = checkpoint.SetLatest(nil, dir, good.Tag) })
			if rs.pointErr != nil {
				return resumed{}, fmt.Errorf("resume from %s: %w", dir, rs.pointErr)
			}
			note += fmt.Sprintf("; latest now names %s, and the damaged checkpoint stays until a save replaces or rotates it out", good.Tag)
		}
	}
	var st trainState
	if err := json.Unmarshal(res.ClientState, &st); err != nil {
		return resumed{}, fmt.Errorf("resume from %s: client state: %w", dir, err)
	}
	if st.Windows != 0 && st.Windows != s.N {
		return resumed{}, fmt.Errorf("resume from %s: the checkpoint trained on %d token windows, this run has %d: "+
			"resume with the same --data and the same --eval-interval/--eval-iters (evaluating holds out some of --data's windows), "+
			"or start a new save_dir", dir, st.Windows, s.N)
	}
	if err := s.SetPosition(st.Sampler); err != nil {
		return resumed{}, fmt.Errorf("resume from %s: sampler: %w", dir, err)
	}
	return resumed{first: e.GlobalSteps() + 1, dir: dir, why: src.why, note: note, loadNotes: res.Notes}, nil
}

// loadModuleOnlyHelp is --load-module-only's flag text.
const loadModuleOnlyHelp = "load only the parameters of checkpoint.load_path's checkpoint (DeepSpeed's load_checkpoint(load_module_only=True), Megatron's --finetune): the optimizer state, LR schedule, loss scale, step count and data position start fresh and training starts at step 1 (a run that unfreezes or freezes parameters with --freeze, say); a restart that finds this run's own checkpoint in save_dir resumes from it whole"

// check refuses --load-module-only without a checkpoint.load_path outside
// save_dir to seed from: the run's own checkpoints always resume whole.
func (rs *resumer) check(cfg *config.Config) error {
	if !rs.moduleOnly {
		return nil
	}
	if cfg.Checkpoint.LoadPath == nil || *cfg.Checkpoint.LoadPath == "" {
		return errors.New("--load-module-only: the config has no checkpoint.load_path to load the parameters from")
	}
	lp, save := filepath.Clean(*cfg.Checkpoint.LoadPath), filepath.Clean(cfg.Checkpoint.SaveDir)
	if cfg.Checkpoint.SaveDir != "" && (lp == save || filepath.Dir(lp) == save) {
		return fmt.Errorf("--load-module-only: checkpoint.load_path %q is checkpoint.save_dir or inside it: the fresh run would save over its steps; seed a new save_dir from it", *cfg.Checkpoint.LoadPath)
	}
	return nil
}

// seedModule loads the parameters alone of src, checkpoint.load_path's
// checkpoint (--load-module-only): the run starts at step 1 with a fresh
// sampler, optimizer and schedule.
func (rs *resumer) seedModule(ctx context.Context, cfg *config.Config, e deepgo.Trainer, src resumeSource) (resumed, error) {
	res, err := e.Load(ctx, src.dir, deepgo.LoadOptions{Tag: src.tag, ModuleOnly: true})
	if err != nil {
		return resumed{}, fmt.Errorf("checkpoint.load_path %q (--load-module-only): %w", *cfg.Checkpoint.LoadPath, err)
	}
	note := fmt.Sprintf("--load-module-only: loaded the parameters of %s; the optimizer state, LR schedule, loss scale, step count and data position start fresh", res.Path)
	return resumed{first: 1, dir: src.dir, note: note, loadNotes: res.Notes}, nil
}

// fallbackTag decides what to do about loadErr, the failure to load the
// checkpoint latest names. If that checkpoint verifies, the failure is not
// damage and is returned as it is. If it is damaged, the error lists the
// checkpoints that verify, newest first, unless rs.fallback asks for the
// newest of them, which is returned with a description of the damage.
func (rs *resumer) fallbackTag(ctx context.Context, dir string, loadErr error) (good checkpoint.Verdict, damaged string, err error) {
	rs.once.Do(func() {
		rs.latest, _ = checkpoint.ReadLatest(nil, dir)
		rs.verdicts, rs.listErr = checkpoint.VerifyAll(ctx, nil, dir)
	})
	loadErr = fmt.Errorf("resume from %s: %w", dir, loadErr)
	if rs.listErr != nil {
		return good, "", loadErr
	}
	found := false
	var verified []checkpoint.Verdict
	for _, v := range rs.verdicts {
		switch {
		case v.Tag == rs.latest && v.Err == nil:
			return good, "", loadErr // intact: the failure is not damage
		case v.Tag == rs.latest:
			found, damaged = true, fmt.Sprintf("the latest checkpoint %s does not verify (%v)", v.Tag, v.Err)
		case v.Err == nil:
			verified = append(verified, v)
		}
	}
	switch {
	case rs.latest == "":
		damaged = "the latest file of " + dir + " is unreadable"
	case !found:
		damaged = fmt.Sprintf("the latest checkpoint %s is missing", rs.latest)
	}
	var list []string
	for _, v := range verified {
		list = append(list, fmt.Sprintf("%s (step %d)", v.Tag, v.Step))
	}
	switch {
	case len(verified) == 0:
		return good, "", fmt.Errorf("%w\n%s, and no other checkpoint in %s verifies", loadErr, damaged, dir)
	case !rs.fallback:
		return good, "", fmt.Errorf("%w\n%s; checkpoints that verify, newest first: %s; run again with --resume-fallback to resume from %s",
			loadErr, damaged, strings.Join(list, ", "), verified[0].Tag)
	}
	return verified[0], damaged, nil
}

// trainSaver writes deepgo train's checkpoints under checkpoint.save_dir
// (tag global_step<N>, keep_n_most_recent rotation as configured): with
// checkpoint.writer.decoupled in the background (Trainer.SaveAsync: the
// files are written while the next steps train), else synchronously.
type trainSaver struct {
	dir        string
	background bool
	pending    string // the tag being written in the background; "" for none
}

// newTrainSaver is cfg's trainSaver.
func newTrainSaver(cfg *config.Config) *trainSaver {
	dir, w := cfg.Checkpoint.SaveDir, cfg.Checkpoint.Writer
	return &trainSaver{dir: dir, background: dir != "" && w != nil && w.Decoupled}
}

// save checkpoints e with the sampler's position and returns the tags it
// knows committed: the one it wrote, or, saving in the background, the one
// written before, which SaveAsync waited for.
func (ts *trainSaver) save(ctx context.Context, e deepgo.Trainer, s *data.DistributedSampler) ([]string, error) {
	client, err := json.Marshal(trainState{Sampler: s.Position(), Windows: s.N})
	if err != nil {
		return nil, err
	}
	tag := checkpoint.DefaultTag(int64(e.GlobalSteps())) // the engine's default tag, named here to be reported
	opts := deepgo.SaveOptions{Tag: tag, ClientState: client}
	if !ts.background {
		if err := e.Save(ctx, ts.dir, opts); err != nil {
			return nil, fmt.Errorf("checkpoint to %s: %w", ts.dir, err)
		}
		return []string{tag}, nil
	}
	if err := e.SaveAsync(ctx, ts.dir, opts); err != nil {
		return nil, fmt.Errorf("checkpoint to %s (checkpoint.writer.decoupled): %w", ts.dir, err)
	}
	var done []string
	if ts.pending != "" {
		done = append(done, ts.pending)
	}
	ts.pending = tag
	return done, nil
}

// wait waits for the background save in flight and returns its tag ("":
// none).
func (ts *trainSaver) wait(e deepgo.Trainer) (string, error) {
	tag := ts.pending
	ts.pending = ""
	if err := e.WaitSave(); err != nil {
		return "", fmt.Errorf("checkpoint %s to %s (checkpoint.writer.decoupled): %w", tag, ts.dir, err)
	}
	return tag, nil
}

// decoupledNotes is deepgo train's note on checkpoint.writer.decoupled
// true: what it does, or that it does nothing without save_dir.
func decoupledNotes(cfg *config.Config) []string {
	switch w := cfg.Checkpoint.Writer; {
	case w == nil || !w.Decoupled:
		return nil
	case cfg.Checkpoint.SaveDir == "":
		return []string{"checkpoint.writer.decoupled: no effect: checkpoint.save_dir is not set, so the run saves no checkpoint"}
	}
	return []string{"checkpoint.writer.decoupled: checkpoints are written in the background while training goes on (each save first waits for the one before; the run's end and an interrupt wait for the one in flight)"}
}

// savedLine is the line saying tag was committed.
func (ts *trainSaver) savedLine(tag string) string {
	line := "saved checkpoint " + filepath.Join(ts.dir, tag)
	if ts.background {
		line += " (written in the background)"
	}
	return line
}

// checkSaveModel refuses --save-model DIR before training when the
// engine's SaveModel would refuse it after the last step: at ZeRO stage 3
// without stage3_gather_16bit_weights_on_model_save, or a DIR that cannot
// be a directory (rank 0 creates it now: a file in the way, no permission).
// A DIR named like the file is refused: the file is DIR/model.safetensors.
func checkSaveModel(cfg *config.Config, dir string, rank int) error {
	if dir == "" {
		return nil
	}
	if err := deepgo.CheckSaveModel(cfg); err != nil {
		return fmt.Errorf("--save-model %s: %w", dir, err)
	}
	if strings.HasSuffix(dir, ".safetensors") || strings.HasSuffix(dir, ".bin") {
		return fmt.Errorf("--save-model %s: want a directory: the file written is DIR/%s", dir, deepgo.DefaultModelFile)
	}
	if rank == 0 {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("--save-model %s: %w", dir, err)
		}
	}
	return nil
}

// saveModel writes the trained model for --save-model dir (nothing when
// dir is empty); rank 0 says where, after clear.
func saveModel(ctx context.Context, e deepgo.Trainer, dir string, rank int, stdout io.Writer, clear func()) error {
	if dir == "" {
		return nil
	}
	if err := e.SaveModel(ctx, dir, deepgo.SaveModelOptions{}); err != nil {
		return fmt.Errorf("--save-model %s: %w", dir, err)
	}
	if rank == 0 {
		clear()
		fmt.Fprintln(stdout, "saved model", filepath.Join(dir, deepgo.DefaultModelFile))
	}
	return nil
}

// saveModelNotes is deepgo train's note on
// stage3_gather_16bit_weights_on_model_save true without --save-model:
// only the whole-model file reads it.
func saveModelNotes(cfg *config.Config, dir string) []string {
	if dir != "" || !cfg.ZeroOptimization.Stage3Gather16bitWeightsOnModelSave {
		return nil
	}
	return []string{"zero_optimization.stage3_gather_16bit_weights_on_model_save: no effect without --save-model: checkpoints hold the partitioned states (consolidate one with deepgo ckpt consolidate); --save-model DIR writes the whole model after the last step"}
}
