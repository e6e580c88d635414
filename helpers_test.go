package deepgo_test

import (
	"context"
	"fmt"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/model"
)

// initEngine is deepgo.Initialize for tests that reach the data-parallel
// engine's own methods (ZeRO internals, SaveAsync, counters).
func initEngine(ctx context.Context, cfg *config.Config, m model.Model, opts ...deepgo.Option) (*deepgo.Engine, error) {
	t, err := deepgo.Initialize(ctx, cfg, m, opts...)
	if err != nil {
		return nil, err
	}
	e, ok := t.(*deepgo.Engine)
	if !ok {
		t.Close()
		return nil, fmt.Errorf("Initialize returned %T, want *deepgo.Engine", t)
	}
	return e, nil
}
