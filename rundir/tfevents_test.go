package rundir_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/monitor"
	"github.com/deepgo-ml/deepgo/rundir"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// f32 is v as tensorboard keeps it.
func f32(v float64) float64 { return float64(float32(v)) }

// A run directory with tensorboard alone reads as one with csv files: the
// event files torch's SummaryWriter wrote for DeepSpeed's TensorBoardMonitor
// (testdata/gen_tfevents.py), a resumed job's second file replacing the
// steps it replayed, the batch size and train_loss's place inferred from
// the x values; torch's new-style scalars (one-element tensors) too.
func TestReadTensorboardOnly(t *testing.T) {
	r, err := rundir.Read(filepath.Join("testdata", "tensorboard-deepspeed"))
	require.NoError(t, err)
	assert.Equal(t, int64(8), r.TrainBatchSize)
	assert.False(t, r.LossAfterStep, "DeepSpeed's data-parallel engine: train_loss a batch before lr")
	assert.Equal(t, []string{rundir.TagLossScale, rundir.TagLR, rundir.TagLoss}, r.Tags())
	loss := r.Get(rundir.TagLoss)
	assert.Equal(t, []int64{1, 2, 3, 4}, loss.Steps)
	assert.Equal(t, []float64{4, 3, 2, 1}, loss.Values, "step 3 as the resumed job wrote it")
	lr := r.Get(rundir.TagLR)
	assert.Equal(t, []int64{1, 2, 3, 4}, lr.Steps)
	assert.Equal(t, []float64{f32(0.001), f32(0.002), f32(0.003), f32(0.004)}, lr.Values)

	r, err = rundir.Read(filepath.Join("testdata", "tensorboard-newstyle"))
	require.NoError(t, err)
	assert.Equal(t, []float64{4, 3, 2}, r.Get(rundir.TagLoss).Values)
	assert.Equal(t, []int64{1, 2, 3}, r.Get(rundir.TagLR).Steps)
}

// deepgo's own event files read back as its csv files do (to float32), and
// where both exist the csv files win (full float64 values).
func TestReadTensorboardFromMonitor(t *testing.T) {
	for _, csv := range []bool{false, true} {
		out := t.TempDir()
		cfg, err := config.Parse([]byte(fmt.Sprintf(`{"train_batch_size": 4,
			"tensorboard": {"enabled": true, "output_path": %q, "job_name": "j"},
			"csv_monitor": {"enabled": %v, "output_path": %q, "job_name": "j"}}`, out, csv, out)))
		require.NoError(t, err)
		m, err := monitor.New(cfg, 0)
		require.NoError(t, err)
		loss := []float64{2.5, 1.0 / 3, math.Pi}
		for i, l := range loss {
			require.NoError(t, m.Observe(context.Background(), monitor.Record{Step: i + 1, Loss: l, LR: 0.1, LossScale: 1, StepTime: time.Millisecond}))
		}
		require.NoError(t, m.Close())
		r, err := rundir.Read(filepath.Join(out, "j"))
		require.NoError(t, err)
		assert.Equal(t, int64(4), r.TrainBatchSize)
		s := r.Get(rundir.TagLoss)
		require.NotNil(t, s)
		assert.Equal(t, []int64{1, 2, 3}, s.Steps, "csv %v", csv)
		want := []float64{f32(loss[0]), f32(loss[1]), f32(loss[2])}
		if csv {
			want = loss
		}
		assert.Equal(t, want, s.Values, "csv %v", csv)
		assert.Equal(t, []int64{1, 2, 3}, r.Get(rundir.TagGradNorm).Steps, "deepgo's own tags at the step")
	}
}

// A record cut short (a writer killed mid-write) ends the file quietly; a
// damaged one is an error naming the file and the record's offset.
func TestReadEventsDamage(t *testing.T) {
	src, err := filepath.Glob(filepath.Join("testdata", "tensorboard-newstyle", rundir.EventFilePrefix+"*"))
	require.NoError(t, err)
	require.Len(t, src, 1)
	b, err := os.ReadFile(src[0])
	require.NoError(t, err)

	dir := t.TempDir()
	name := filepath.Join(dir, filepath.Base(src[0]))
	require.NoError(t, os.WriteFile(name, b[:len(b)-3], 0o644))
	ev, err := rundir.ReadEvents(dir)
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 8, 16}, ev[rundir.TagLoss].Steps, "the records before the cut read")
	assert.Equal(t, []int64{8, 16}, ev[rundir.TagLossScale].Steps, "the last record (step 3's loss_scale) is lost")

	bad := append([]byte(nil), b...)
	bad[len(bad)-10] ^= 0xff // inside the last record's data
	require.NoError(t, os.WriteFile(name, bad, 0o644))
	_, err = rundir.ReadEvents(dir)
	require.ErrorContains(t, err, name)
	assert.ErrorContains(t, err, "data CRC mismatch")

	require.NoError(t, os.WriteFile(name, []byte("step,train_loss\n1,2\n"), 0o644))
	_, err = rundir.Read(dir)
	assert.ErrorContains(t, err, "length CRC mismatch")
}

// Event files add only the contract's tags a csv file lacks: a tag the csv
// files hold (eval_loss, written at global_samples 0 before the first step)
// is not doubled, a tag outside the contract (a trainer's own) neither
// fails Read nor doubles its csv series; and beside csv files, an event
// file that does not read is a note.
func TestReadEventsBesideCSV(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"Train_Samples_train_loss.csv": "step,train_loss\r\n0,4\r\n8,3\r\n",
		"Train_Samples_lr.csv":         "step,lr\r\n8,0.1\r\n16,0.1\r\n",
		"Train_Samples_eval_loss.csv":  "step,eval_loss\r\n0,5\r\n16,4\r\n",
		"Train_Samples_my_metric.csv":  "step,my_metric\r\n8,1\r\n",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	w, err := monitor.NewTensorboardWriter(dir)
	require.NoError(t, err)
	require.NoError(t, w.WriteEvents(0, []monitor.Event{{Tag: rundir.TagEvalLoss, Value: 5, Step: 0}, {Tag: "Train/Samples/my_metric", Value: 1, Step: 8}, {Tag: rundir.TagLossScale, Value: 2, Step: 8}}))
	require.NoError(t, w.Close())
	r, err := rundir.Read(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{rundir.TagEvalLoss, rundir.TagLossScale, rundir.TagLR, rundir.TagLoss, "Train_Samples_my_metric"}, r.Tags())
	assert.Empty(t, r.Notes)
	assert.Equal(t, []int64{0, 2}, r.Get(rundir.TagEvalLoss).Steps, "eval_loss before training and after step 2")
	assert.Equal(t, []float64{5, 4}, r.Get(rundir.TagEvalLoss).Values)

	require.NoError(t, os.WriteFile(w.Path(), []byte("not an event file at all"), 0o644))
	r, err = rundir.Read(dir)
	require.NoError(t, err)
	require.Len(t, r.Notes, 1)
	assert.Contains(t, r.Notes[0], "length CRC mismatch")
	assert.Equal(t, []int64{1, 2}, r.Get(rundir.TagLoss).Steps)
}

// TestMaskedCRC: the CRC32C test vector of RFC 3720 (32 zero bytes ->
// 0x8a9136aa) masked as TFRecord masks it.
func TestMaskedCRC(t *testing.T) {
	c := uint32(0x8a9136aa)
	assert.Equal(t, (c>>15|c<<17)+0xa282ead8, rundir.MaskedCRC(make([]byte, 32)))
}
