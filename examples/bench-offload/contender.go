package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/internal/testmodel"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/offload"
)

// contender is one engine the rounds time: optimizer state in memory, or
// swapped through a folder (store set).
type contender struct {
	o     options
	e     *deepgo.Engine
	store *offload.NVMeStore
	rng   *rand.Rand
	steps []float64 // ms of each timed step
	optim time.Duration
	io    offload.IOStats // over the timed steps
	last  offload.IOStats // at the end of the last timed step
	timed int
}

// newContender builds the engine; nvmePath "" keeps the state in memory.
func newContender(o options, nvmePath string) (*contender, error) {
	off := ""
	if nvmePath != "" {
		off = fmt.Sprintf(`, "sub_group_size": %d, "offload_optimizer": {"device": "nvme", "nvme_path": %q, "buffer_count": %d, "pipeline_read": true, "pipeline_write": true}`,
			o.subGroup, nvmePath, o.buffers)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`{"train_micro_batch_size_per_gpu": %d, "gradient_accumulation_steps": 1,
		"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
		"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e7%s}}`, o.micro, off)))
	if err != nil {
		return nil, err
	}
	c := &contender{o: o, rng: rand.New(rand.NewPCG(1, 3))}
	var opts []deepgo.Option
	if nvmePath != "" {
		so, err := offload.NVMeOptionsFromConfig(cfg, 0)
		if err != nil {
			return nil, err
		}
		if c.store, err = offload.NewNVMeStore(so); err != nil {
			return nil, err
		}
		opts = append(opts, deepgo.WithStateStore(c.store))
	}
	sizes := make([]int, o.layers+1)
	for i := range sizes {
		sizes[i] = o.hidden
	}
	t, err := deepgo.Initialize(context.Background(), cfg, testmodel.NewMLP(1, sizes...), opts...)
	if err != nil {
		if c.store != nil {
			c.store.Close()
		}
		return nil, err
	}
	var ok bool
	if c.e, ok = t.(*deepgo.Engine); !ok {
		t.Close()
		return nil, fmt.Errorf("deepgo.Initialize returned %T, want *deepgo.Engine", t)
	}
	return c, nil
}

func (c *contender) batch() []model.MicroBatch {
	n := c.o.micro * c.o.hidden
	x := testmodel.Batch{Rows: c.o.micro, Cols: c.o.hidden, X: make([]float32, n)}
	y := testmodel.Batch{Rows: c.o.micro, Cols: c.o.hidden, X: make([]float32, n)}
	for i := range x.X {
		x.X[i] = float32(c.rng.NormFloat64())
		y.X[i] = float32(c.rng.NormFloat64() * 0.1)
	}
	return []model.MicroBatch{{Input: x, Target: y}}
}

// run times steps steps, after an untimed one when warm (the swapper's
// first step learns the sub-groups' order and runs unplanned).
func (c *contender) run(steps int, warm bool) error {
	ctx := context.Background()
	if warm {
		if _, err := c.e.TrainBatch(ctx, c.batch()); err != nil {
			return err
		}
	}
	for range steps {
		b := c.batch()
		if c.store != nil && c.timed == 0 {
			c.last = c.store.IOStats()
		}
		opt0 := c.e.Timers().Optimizer
		t0 := time.Now()
		if _, err := c.e.TrainBatch(ctx, b); err != nil {
			return err
		}
		c.steps = append(c.steps, float64(time.Since(t0).Microseconds())/1e3)
		c.optim += c.e.Timers().Optimizer - opt0
		if c.store != nil {
			// from the end of the last timed step: the reads prefetched
			// after it, while the other contender ran, count too
			now := c.store.IOStats()
			d := now.Sub(c.last)
			c.last = now
			c.io.ReadBytes += d.ReadBytes
			c.io.WriteBytes += d.WriteBytes
			c.io.Busy += d.Busy
			c.io.Waited += d.Waited
		}
		c.timed++
	}
	return nil
}

func (c *contender) stateBytes() int64 { return c.e.Memory().OptimizerState }

func (c *contender) memoryRow() memoryRow {
	return memoryRow{StepMS: median(c.steps), OptimizerMS: ms(c.optim) / float64(c.timed),
		StateBytes: c.e.Memory().OptimizerState, StepAllMS: c.steps}
}

func (c *contender) offloadRow(d diskRow) offloadRow {
	n := float64(c.timed)
	m := c.e.Memory()
	r := offloadRow{StepMS: median(c.steps), OptimizerMS: ms(c.optim) / n,
		ReadMB: float64(c.io.ReadBytes) / n / 1e6, WriteMB: float64(c.io.WriteBytes) / n / 1e6,
		IOMS: ms(c.io.Busy) / n, WaitMS: ms(c.io.Waited) / n, Hidden: c.io.Hidden(),
		SwapBuffers: m.SwapBuffers, StateOnDisk: m.OptimizerStateOnDisk, StepAllMS: c.steps}
	if m.OptimizerState > 0 {
		r.BufferShare = float64(m.SwapBuffers) / float64(m.OptimizerState)
	}
	if d.ReadGBps > 0 && d.WriteGBps > 0 {
		r.IOFloorMS = r.ReadMB/d.ReadGBps + r.WriteMB/d.WriteGBps // MB / (GB/s) = ms
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func (c *contender) close() {
	c.e.Close() // closes the store too (the optimizer owns its state store)
}
