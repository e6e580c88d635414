package main

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/comm"
	"github.com/deepgo-ml/deepgo/comm/local"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
	"github.com/deepgo-ml/deepgo/model"
	"github.com/deepgo-ml/deepgo/nn"
	"github.com/stretchr/testify/require"
)

// BenchmarkMonitorOverhead: the demo (configs/demo-zero2.json with
// csv_monitor, tensorboard and wall_clock_breakdown, tiny GPT, 2 ranks) in
// one run, steps with and without Observe interleaved (ABBA, so drift
// falls on both), reporting the median step time of each and the median
// cost of Observe itself as a share of the median step.
//
//	go test -run '^$' -bench MonitorOverhead -benchtime 1x ./cmd/deepgo
func BenchmarkMonitorOverhead(b *testing.B) {
	t := &testing.T{}
	cfgPath, _ := demoConfig(t)
	const steps = 400
	mc := trainModels["tiny"]
	m, err := data.NewMarkov(mc.vocab, 1, mc.branch, 3)
	require.NoError(b, err)
	corpus := &data.Tokens{IDs: m.Generate(200000, 4), Vocab: mc.vocab}
	var with, without, observe []float64
	b.ResetTimer()
	err = local.Run(context.Background(), 2, local.Options{Timeout: 5 * time.Minute, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return err
		}
		g := mc.gpt
		g.Vocab = corpus.Vocab
		gpt, err := nn.NewReadyGPT(g, nil, 1)
		if err != nil {
			return err
		}
		defer gpt.Free()
		e, err := deepgo.Initialize(ctx, cfg, gpt, deepgo.WithComm(c))
		if err != nil {
			return err
		}
		defer e.Close()
		tm, err := newTrainMonitor(cfg, e, c.Rank(), 50, trainerArgs{}, runMeta{world: 2, steps: steps}, nil, io.Discard)
		if err != nil {
			return err
		}
		defer tm.close()
		s, err := data.NewDistributedSampler(corpus.NumWindows(g.SeqLen), c.Rank(), 2, 5, true)
		if err != nil {
			return err
		}
		for step := 1; step <= steps; step++ {
			mb := corpus.MakeBatch(s.Next(e.BatchSizes().MicroBatch), g.SeqLen).MicroBatch()
			on := step%4 == 1 || step%4 == 0 // ABBA
			t0 := time.Now()
			loss, err := e.TrainBatch(ctx, []model.MicroBatch{mb})
			if err != nil {
				return err
			}
			t1 := time.Now()
			if on {
				if err := tm.observe(ctx, loss, t1.Sub(t0), 256); err != nil {
					return err
				}
			}
			took := time.Since(t0).Seconds() * 1e3
			if c.Rank() == 0 && step > 20 { // after warm-up
				if on {
					with = append(with, took)
					observe = append(observe, time.Since(t1).Seconds()*1e3)
				} else {
					without = append(without, took)
				}
			}
		}
		return nil
	})
	require.NoError(b, err)
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	mw, mo, obs := med(with), med(without), med(observe)
	b.ReportMetric(mw, "ms/step_with")
	b.ReportMetric(mo, "ms/step_without")
	b.ReportMetric(100*(mw-mo)/mo, "%_step_diff")
	b.ReportMetric(1e3*obs, "us/observe")
	b.ReportMetric(100*obs/mo, "%_observe_of_step")
}
