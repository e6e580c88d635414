package optim_test

import (
	"errors"
	"fmt"

	"github.com/deepgo-ml/deepgo/optim"
)

// A dynamic loss scaler with DeepSpeed's ZeRO semantics: with hysteresis 2
// the first overflow only uses up hysteresis, the second halves the scale,
// and the scale grows after ScaleWindow clean steps.
func ExampleNewDynamicScaler() {
	cfg := optim.DefaultDynamicScalerConfig() // 2**16, window 1000, hysteresis 2, min 1
	cfg.ScaleWindow = 2
	s, err := optim.NewDynamicScaler(cfg)
	if err != nil {
		panic(err)
	}
	for _, overflow := range []bool{true, true, false, false, false} {
		// backward with s.Scale(); check the gradients; skip the step on overflow
		if err := s.Update(overflow); errors.Is(err, optim.ErrLossScaleAtMinimum) {
			panic(err)
		}
		fmt.Printf("overflow=%-5v scale=%v hysteresis=%d\n", overflow, s.Scale(), s.Hysteresis())
	}
	// Output:
	// overflow=true  scale=65536 hysteresis=1
	// overflow=true  scale=32768 hysteresis=1
	// overflow=false scale=32768 hysteresis=1
	// overflow=false scale=32768 hysteresis=1
	// overflow=false scale=65536 hysteresis=2
}

// A static scale, as with "fp16": {"loss_scale": 128}.
func ExampleNewStaticScaler() {
	s, err := optim.NewStaticScaler(128)
	if err != nil {
		panic(err)
	}
	_ = s.Update(true)
	fmt.Println(s.Scale(), s.Dynamic())
	// Output: 128 false
}

// Build a schedule from the ds_config "scheduler" block and step it after
// every optimizer step that did not overflow.
func ExampleNewSchedule() {
	params := map[string]any{ // "scheduler": {"type": "WarmupLR", "params": {...}}
		"warmup_min_lr":    0,
		"warmup_max_lr":    0.001,
		"warmup_num_steps": 4,
		"warmup_type":      "linear",
	}
	sched, err := optim.NewSchedule("WarmupLR", params, []float64{0.001})
	if err != nil {
		panic(err)
	}
	for step := 0; step < 6; step++ {
		fmt.Printf("step %d lr %.6f\n", step, sched.LR()[0]) // optimizer step uses this lr
		sched.Step()
	}
	_, err = optim.NewSchedule("WarmupLR", map[string]any{"warmup_num_steps": -1}, []float64{0.001})
	fmt.Println(err)
	// Output:
	// step 0 lr 0.000000
	// step 1 lr 0.000000
	// step 2 lr 0.000250
	// step 3 lr 0.000500
	// step 4 lr 0.000750
	// step 5 lr 0.001000
	// optim: WarmupLR: scheduler.params.warmup_num_steps: -1: must be >= 0
}

// OneCycle drives beta1 of Adam-like optimizers inversely to the LR.
func ExampleNewSchedule_oneCycle() {
	sched, err := optim.NewSchedule("OneCycle", map[string]any{
		"cycle_min_lr": 0.01, "cycle_max_lr": 0.1,
		"cycle_first_step_size": 2, "cycle_min_mom": 0.85, "cycle_max_mom": 0.95,
	}, []float64{0.01})
	if err != nil {
		panic(err)
	}
	for range 4 {
		sched.Step()
		betas, _ := sched.Betas()
		fmt.Printf("t=%d lr=%.3f beta1=%.3f\n", sched.LastBatchIteration(), sched.LR()[0], betas[0][0])
	}
	// Output:
	// t=0 lr=0.055 beta1=0.900
	// t=1 lr=0.100 beta1=0.850
	// t=2 lr=0.055 beta1=0.900
	// t=3 lr=0.010 beta1=0.950
}

// ClipCoefficient scales gradients whose global norm exceeds the limit.
func ExampleClipCoefficient() {
	fmt.Printf("%.6f %.1f\n", optim.ClipCoefficient(4, 1), optim.ClipCoefficient(0.5, 1))
	// Output: 0.250000 1.0
}
