package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Info is deepgo_run.json: the facts of a run a monitor cannot put in a
// series. The monitor writes it at the start and rewrites it at the end.
type Info struct {
	// Config is the resolved DeepSpeed config (config.Config.JSON).
	Config json.RawMessage `json:"config"`
	// World is the number of ranks.
	World int `json:"world"`
	// Device is where the run computed: "cpu", "sim:0", "cuda:0".
	Device string `json:"device"`
	// Params is the model's parameter count.
	Params int64 `json:"params"`
	// EntropyFloor is the lowest loss the data allows (the entropy rate of a
	// synthetic corpus), nil where unknown.
	EntropyFloor *float64 `json:"entropy_floor"`
	// MemoryCapacityBytes is the memory the run could use: host RAM on the
	// CPU, the device's total memory on a GPU.
	MemoryCapacityBytes int64 `json:"memory_capacity_bytes"`
	// Steps is the number of optimizer steps run so far.
	Steps int64 `json:"steps"`
	// TrainBatchSize is the samples per optimizer step (DeepSpeed's
	// train_batch_size) the monitor wrote the Train/Samples tags with: their
	// x is global_samples (XAxis). 0 (absent) in a directory written by a
	// deepgo that put every tag at its step.
	TrainBatchSize int64 `json:"train_batch_size,omitempty"`
	// TrainLossAfterStep says train_loss was written after its step's
	// update, at the same global_samples as lr: a pipeline run, as
	// DeepSpeed's PipelineEngine writes it (XAxis.LossAfterStep).
	TrainLossAfterStep bool `json:"train_loss_after_step,omitempty"`
}

// OnCPU reports whether the run computed on the host (device "cpu" or unknown).
func (i *Info) OnCPU() bool { return i == nil || i.Device == "" || i.Device == "cpu" }

// HasConfig reports whether the run recorded its config (not absent, not null).
func (i *Info) HasConfig() bool {
	return i != nil && len(i.Config) > 0 && string(i.Config) != "null"
}

// Run is a run directory as read.
type Run struct {
	// Dir is the directory read.
	Dir string
	// Info is deepgo_run.json; nil when the directory has none (a run
	// written by DeepSpeed itself).
	Info *Info
	// Series are the CSV files by tag, each keyed on optimizer steps: Read
	// turns the global_samples of the Train/Samples tags into steps.
	Series map[string]*Series
	// TrainBatchSize is the samples per step Read divided the Train/Samples
	// x values by: Info's, else (a directory DeepSpeed wrote) the greatest
	// common divisor of those values. 0 when they were steps already (a
	// deepgo_run.json without train_batch_size).
	TrainBatchSize int64
	// LossAfterStep says train_loss was read as written after its step's
	// update (a pipeline run, XAxis.LossAfterStep): Info's
	// train_loss_after_step, else (a directory DeepSpeed wrote) whether
	// train_loss and lr start at the same global_samples, where a
	// data-parallel engine's train_loss (deepgo's, DeepSpeed's of earlier
	// releases) starts one batch earlier.
	LossAfterStep bool
	// Notes say what Read left out and why (event files that did not
	// read beside csv files that did).
	Notes []string
}

// Get returns the series of tag, or nil when the run has no such file.
func (r *Run) Get(tag string) *Series { return r.Series[tag] }

// Tags lists the run's tags, sorted.
func (r *Run) Tags() []string {
	out := make([]string, 0, len(r.Series))
	for t := range r.Series {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// ErrNoRun means a directory holds neither deepgo_run.json nor a CSV file
// nor tensorboard scalars.
var ErrNoRun = errors.New("not a run directory")

// Read reads the run directory dir: deepgo_run.json where present, every
// *.csv file, and the scalars of tensorboard's event files for the tags no
// csv file holds (ReadEvents; tensorboard keeps float32 values), with each
// series keyed on optimizer steps (see Run.TrainBatchSize). An error names
// the file it is about.
func Read(dir string) (*Run, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rundir: %w", err)
	}
	r := &Run{Dir: dir, Series: map[string]*Series{}}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		switch {
		case e.Type()&fs.ModeType != 0:
			continue
		case name == InfoFile:
			if r.Info, err = ReadInfo(path); err != nil {
				return nil, err
			}
		case strings.HasSuffix(name, csvExt):
			s, err := ReadSeries(path)
			if err != nil {
				return nil, err
			}
			r.Series[s.Tag] = s
		}
	}
	// tensorboard's event files fill in the contract's tags no csv file
	// holds (a run with tensorboard alone): the csv files keep full
	// float64 values. Other tags (eval_loss, a trainer's own) stay out:
	// their csv series are keyed by file name, and their x values follow
	// no rule this package knows. With csv files present, event files that
	// do not read are a note, not a failure.
	events, err := ReadEvents(dir)
	switch {
	case err != nil && len(r.Series) == 0:
		return nil, err
	case err != nil:
		r.Notes = append(r.Notes, fmt.Sprintf("tensorboard event files not read (the csv files are): %v", err))
	}
	fromEvents := map[string]bool{}
	for tag, s := range events {
		if r.Series[tag] == nil && slices.Contains(Tags, tag) {
			r.Series[tag], fromEvents[tag] = s, true
		}
	}
	if r.Info == nil && len(r.Series) == 0 {
		return nil, fmt.Errorf("rundir: %s: %w: want %s, csv_monitor files such as %s or tensorboard's %s* files with scalars", dir, ErrNoRun, InfoFile, FileName(TagLoss), EventFilePrefix)
	}
	switch {
	case r.Info == nil:
		r.TrainBatchSize = inferBatch(r.Series)
		loss, lr := r.Series[TagLoss], r.Series[TagLR]
		r.LossAfterStep = loss != nil && lr != nil && loss.Len() > 0 && lr.Len() > 0 && loss.Steps[0] == lr.Steps[0]
	default:
		r.TrainBatchSize, r.LossAfterStep = r.Info.TrainBatchSize, r.Info.TrainLossAfterStep
	}
	if r.TrainBatchSize == 0 {
		return r, nil
	}
	axis := XAxis{TrainBatchSize: r.TrainBatchSize, LossAfterStep: r.LossAfterStep}
	for _, tag := range r.Tags() {
		if err := r.Series[tag].samplesToSteps(axis); err != nil {
			if fromEvents[tag] {
				return nil, fmt.Errorf("rundir: %s: tensorboard scalars %s: %w", dir, tag, err)
			}
			return nil, fmt.Errorf("rundir: %s: %w", filepath.Join(dir, FileName(tag)), err)
		}
	}
	return r, nil
}

// inferBatch is the train_batch_size of a run directory without
// deepgo_run.json (DeepSpeed's own): the greatest common divisor of the
// Train/Samples x values, each a multiple of it; 1 when they are all 0 or
// there are none.
func inferBatch(series map[string]*Series) int64 {
	g := int64(0)
	for tag, s := range series {
		if !IsSamplesTag(tag) {
			continue
		}
		for _, x := range s.Steps {
			g = gcd(g, x)
		}
	}
	return max(g, 1)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ReadInfo reads a deepgo_run.json file; an error names it.
func ReadInfo(path string) (*Info, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rundir: %w", err)
	}
	var in Info
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("rundir: %s: %w", path, err)
	}
	switch {
	case in.World < 0:
		return nil, fmt.Errorf("rundir: %s: world %d: want >= 0", path, in.World)
	case in.Params < 0:
		return nil, fmt.Errorf("rundir: %s: params %d: want >= 0", path, in.Params)
	case in.MemoryCapacityBytes < 0:
		return nil, fmt.Errorf("rundir: %s: memory_capacity_bytes %d: want >= 0", path, in.MemoryCapacityBytes)
	case in.TrainBatchSize < 0:
		return nil, fmt.Errorf("rundir: %s: train_batch_size %d: want >= 0", path, in.TrainBatchSize)
	}
	return &in, nil
}
