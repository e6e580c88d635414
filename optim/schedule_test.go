package optim

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewScheduleBadParams(t *testing.T) {
	lr1 := []float64{1e-3}
	lr2 := []float64{1e-3, 2e-3}
	tests := []struct {
		name   string
		typ    string
		params map[string]any
		lrs    []float64
		want   string // substring of the error
	}{
		{"unknown type", "Cosine", nil, lr1, `scheduler.type: "Cosine": unknown scheduler type (known: LRRangeTest, OneCycle, WarmupCosineLR, WarmupDecayLR, WarmupLR)`},
		{"lower-case type", "warmuplr", nil, lr1, "unknown scheduler type"},
		{"no param groups", "WarmupLR", nil, nil, "at least one param group"},
		{"nan base lr", "WarmupLR", nil, []float64{nanF()}, "base lr of param group 0"},
		{"negative warmup steps", "WarmupLR", map[string]any{"warmup_num_steps": -1.0}, lr1, "scheduler.params.warmup_num_steps: -1: must be >= 0"},
		{"negative cosine warmup steps", "WarmupCosineLR", map[string]any{"total_num_steps": 10.0, "warmup_num_steps": -3.0}, lr1, "scheduler.params.warmup_num_steps: -3: must be >= 0"},
		{"fractional warmup steps", "WarmupLR", map[string]any{"warmup_num_steps": 2.5}, lr1, "scheduler.params.warmup_num_steps: 2.5: must be an integer"},
		{"bool warmup steps", "WarmupLR", map[string]any{"warmup_num_steps": true}, lr1, "scheduler.params.warmup_num_steps: true: must be an integer"},
		{"auto", "WarmupLR", map[string]any{"warmup_max_lr": "auto"}, lr1, `scheduler.params.warmup_max_lr: "auto": must be a number or a list`},
		{"auto int", "WarmupLR", map[string]any{"warmup_num_steps": "auto"}, lr1, `"auto" is resolved only by the Hugging Face Trainer integration`},
		{"list length", "WarmupLR", map[string]any{"warmup_min_lr": []any{0.0}}, lr2, "scheduler.params.warmup_min_lr: [0]: list must have 2 entries, one per param group, got 1"},
		{"list entry", "WarmupLR", map[string]any{"warmup_max_lr": []any{0.1, "x"}}, lr2, "entry 1 must be a finite number"},
		{"warmup_type not string", "WarmupLR", map[string]any{"warmup_type": 1.0}, lr1, "scheduler.params.warmup_type: 1: must be a string"},
		{"unknown key", "WarmupLR", map[string]any{"warmup_steps": 10.0}, lr1, "scheduler.params.warmup_steps: 10: unknown parameter for WarmupLR (allowed: warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type, last_batch_iteration)"},
		{"decay missing total", "WarmupDecayLR", map[string]any{}, lr1, "scheduler.params.total_num_steps: missing: required by WarmupDecayLR"},
		{"cosine missing total", "WarmupCosineLR", nil, lr1, "scheduler.params.total_num_steps: missing: required by WarmupCosineLR"},
		{"cosine total not int", "WarmupCosineLR", map[string]any{"total_num_steps": "100"}, lr1, `scheduler.params.total_num_steps: "100": must be an integer`},
		{"cosine lr key", "WarmupCosineLR", map[string]any{"total_num_steps": 10.0, "warmup_max_lr": 0.1}, lr1, "unknown parameter for WarmupCosineLR"},
		{"onecycle missing min", "OneCycle", map[string]any{"cycle_max_lr": 0.1}, lr1, "scheduler.params.cycle_min_lr: missing: required by OneCycle"},
		{"onecycle missing max", "OneCycle", map[string]any{"cycle_min_lr": 0.1}, lr1, "scheduler.params.cycle_max_lr: missing: required by OneCycle"},
		{"onecycle zero step", "OneCycle", map[string]any{"cycle_min_lr": 0.1, "cycle_max_lr": 1.0, "cycle_first_step_size": 0.0}, lr1, "scheduler.params.cycle_first_step_size: 0: must be > 0"},
		{"onecycle negative second", "OneCycle", map[string]any{"cycle_min_lr": 0.1, "cycle_max_lr": 1.0, "cycle_second_step_size": -5.0}, lr1, "scheduler.params.cycle_second_step_size: -5: must be > 0"},
		{"onecycle negative stairs", "OneCycle", map[string]any{"cycle_min_lr": 0.1, "cycle_max_lr": 1.0, "cycle_first_stair_count": -1.0}, lr1, "scheduler.params.cycle_first_stair_count: -1: must be >= 0"},
		{"onecycle negative decay step", "OneCycle", map[string]any{"cycle_min_lr": 0.1, "cycle_max_lr": 1.0, "decay_step_size": -1.0}, lr1, "scheduler.params.decay_step_size: -1: must be >= 0"},
		{"onecycle momentum not bool", "OneCycle", map[string]any{"cycle_min_lr": 0.1, "cycle_max_lr": 1.0, "cycle_momentum": "yes"}, lr1, `scheduler.params.cycle_momentum: "yes": must be true or false`},
		{"lrrt zero step", "LRRangeTest", map[string]any{"lr_range_test_step_size": 0.0}, lr1, "scheduler.params.lr_range_test_step_size: 0: must be > 0"},
		{"lrrt staircase", "LRRangeTest", map[string]any{"lr_range_test_staircase": 1.0}, lr1, "scheduler.params.lr_range_test_staircase: 1: must be true or false"},
		{"bad last_batch_iteration", "LRRangeTest", map[string]any{"last_batch_iteration": -2.0}, lr1, "scheduler.params.last_batch_iteration: -2: must be >= -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSchedule(tc.typ, tc.params, tc.lrs)
			if err == nil {
				require.Failf(t, "NewSchedule succeeded", "type %s, want error containing %q", s.Type(), tc.want)
			}
			require.ErrorContains(t, err, tc.want)
			require.True(t, errors.Is(err, ErrInvalidScheduleParam) || errors.Is(err, ErrUnknownSchedule),
				"error %v wraps neither ErrInvalidScheduleParam nor ErrUnknownSchedule", err)
			if strings.Contains(tc.want, "scheduler.params.") {
				var pe *ParamError
				require.ErrorAs(t, err, &pe)
			}
		})
	}
}

func nanF() float64 { return math.NaN() }

func TestScheduleDefaultsAndQuirks(t *testing.T) {
	// warmup_num_steps 1 (and 0, the Hugging Face Trainer's "no warmup")
	// is raised to 2: steps 0 and 1 both use min.
	for _, n := range []int{0, 1} {
		s, err := NewSchedule(ScheduleWarmupLR, map[string]any{"warmup_num_steps": n, "warmup_type": "linear"}, []float64{0.5})
		require.NoError(t, err)
		got := [3]float64{s.LRAt(-1)[0], s.LRAt(0)[0], s.LRAt(1)[0]}
		require.Equal(t, [3]float64{0, 0, 0.25}, got, "warmup_num_steps %d: LRs", n)
	}
	// Unknown warmup_type falls back to log, with a warning.
	var warned []string
	s, err := NewSchedule(ScheduleWarmupLR, map[string]any{"warmup_type": "cosine", "warmup_num_steps": 10},
		[]float64{1}, WithWarnings(func(m string) { warned = append(warned, m) }))
	require.NoError(t, err)
	require.Len(t, warned, 1, "warnings %q", warned)
	require.Contains(t, warned[0], `"cosine"`, "warnings %q", warned)
	require.Equal(t, 1.0/math.Log(10)*math.Log(3), s.LRAt(2)[0], "log warm-up")
	// WarmupDecayLR keeps its 0.001 default max.
	s, err = NewSchedule(ScheduleWarmupDecayLR, map[string]any{"total_num_steps": 10, "warmup_num_steps": 2}, []float64{0.5})
	require.NoError(t, err)
	require.Equal(t, 0.001, s.LRAt(2)[0], "decay peak")
	require.Zero(t, s.LRAt(100)[0], "decay after total")
	// WarmupCosineLR stays at cos_min_ratio after total_num_steps, also
	// when total == warmup.
	s, err = NewSchedule(ScheduleWarmupCosineLR, map[string]any{"total_num_steps": 5, "warmup_num_steps": 5, "cos_min_ratio": 0.1}, []float64{2})
	require.NoError(t, err)
	for _, step := range []int{5, 6, 100} {
		require.Equal(t, 0.2, s.LRAt(step)[0], "cosine LRAt(%d)", step)
	}
	// OneCycle without betas: momentum off.
	s, err = NewSchedule(ScheduleOneCycle, map[string]any{"cycle_min_lr": 0.1, "cycle_max_lr": 1}, []float64{1}, WithoutBetas())
	require.NoError(t, err)
	_, ok := s.Betas()
	require.False(t, ok, "OneCycle drives betas without an optimizer that has them")
	// OneCycle per-group lists.
	s, err = NewSchedule(ScheduleOneCycle, map[string]any{"cycle_min_lr": []any{0.1, 0.2}, "cycle_max_lr": []any{1.0, 2.0},
		"cycle_first_step_size": 10, "cycle_min_mom": []any{0.8, 0.7}}, []float64{1, 1})
	require.NoError(t, err)
	got := s.LRAt(9)
	require.Equal(t, []float64{1.0, 2.0}, got[:2], "peak %v", got)
	b, ok := s.BetasAt(-1)
	require.True(t, ok, "initial betas")
	require.Equal(t, [][2]float64{{0.8, 0.99}, {0.7, 0.99}}, b[:2], "initial betas")
	b, _ = s.BetasAt(9)
	require.Equal(t, [][2]float64{{0.8, 0.99}, {0.7, 0.99}}, b[:2], "peak betas")
}

func TestScheduleStateRoundTrip(t *testing.T) {
	params := map[string]any{"total_num_steps": 100, "warmup_num_steps": 10}
	a, err := NewSchedule(ScheduleWarmupCosineLR, params, []float64{1e-3, 2e-3})
	require.NoError(t, err)
	for range 37 {
		a.Step()
	}
	raw, err := json.Marshal(a.State())
	require.NoError(t, err)
	require.Equal(t, `{"type":"WarmupCosineLR","last_batch_iteration":36}`, string(raw), "state JSON")
	b, err := NewSchedule(ScheduleWarmupCosineLR, params, []float64{1e-3, 2e-3})
	require.NoError(t, err)
	var st ScheduleState
	require.NoError(t, json.Unmarshal(raw, &st))
	require.NoError(t, b.SetState(st))
	for range 80 {
		ga, gb := a.LR(), b.LR()
		require.Equal(t, ga[:2], gb[:2], "restored schedule diverged at t=%d", a.LastBatchIteration())
		a.Step()
		b.Step()
	}
	require.Error(t, b.SetState(ScheduleState{Type: "OneCycle"}), "loaded a OneCycle state into a WarmupCosineLR")
	require.Error(t, b.SetState(ScheduleState{LastBatchIteration: -2}), "accepted last_batch_iteration -2")
	// The last_batch_iteration param resumes like DeepSpeed's kwarg.
	c, err := NewSchedule(ScheduleWarmupCosineLR, map[string]any{"total_num_steps": 100, "warmup_num_steps": 10,
		"last_batch_iteration": 36}, []float64{1e-3, 2e-3})
	require.NoError(t, err)
	require.EqualValues(t, 36, c.LastBatchIteration(), "resume via params: lr=%v", c.LR())
	require.Equal(t, b.LRAt(36)[1], c.LR()[1], "resume via params: t=%d lr=%v", c.LastBatchIteration(), c.LR())
}
