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

// BenchmarkMonitorOverhead: the demo (configs/demo-zero2.json, tiny GPT,
// 2 ranks) in one run on two engines, one with csv_monitor, tensorboard
// and wall_clock_breakdown on and one with the demo's config as it is
// (whose monitor writes nothing), their steps interleaved (ABBA, so drift
// falls on both), reporting the median TrainBatch time of each.
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
	var with, without []float64
	b.ResetTimer()
	err = local.Run(context.Background(), 2, local.Options{Timeout: 5 * time.Minute, Threads: 1}, func(ctx context.Context, c comm.Comm) error {
		var engines [2]deepgo.Trainer // monitored, plain
		for i, path := range []string{cfgPath, "../../configs/demo-zero2.json"} {
			cfg, err := config.Load(path)
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
			e, err := deepgo.Initialize(ctx, cfg, gpt, deepgo.WithComm(c), deepgo.WithLog(io.Discard))
			if err != nil {
				return err
			}
			defer e.Close()
			engines[i] = e
		}
		s, err := data.NewDistributedSampler(corpus.NumWindows(mc.gpt.SeqLen), c.Rank(), 2, 5, true)
		if err != nil {
			return err
		}
		for step := 1; step <= steps; step++ {
			on := step%4 == 1 || step%4 == 0 // ABBA
			e := engines[1]
			if on {
				e = engines[0]
			}
			mb := corpus.MakeBatch(s.Next(e.BatchSizes().MicroBatch), mc.gpt.SeqLen).MicroBatch()
			t0 := time.Now()
			if _, err := e.TrainBatch(ctx, []model.MicroBatch{mb}); err != nil {
				return err
			}
			took := time.Since(t0).Seconds() * 1e3
			if c.Rank() == 0 && step > 40 { // after both engines warmed up
				if on {
					with = append(with, took)
				} else {
					without = append(without, took)
				}
			}
		}
		return nil
	})
	require.NoError(b, err)
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	mw, mo := med(with), med(without)
	b.ReportMetric(mw, "ms/step_with")
	b.ReportMetric(mo, "ms/step_without")
	b.ReportMetric(100*(mw-mo)/mo, "%_step_diff")
}
