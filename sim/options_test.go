package sim_test

import (
	"testing"
	"time"

	"github.com/deepgo-ml/deepgo/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// DEEPGO_SIM_DELAY turns the delay mode on for Options that leave MaxDelay
// at 0; a negative MaxDelay keeps it off; a bad value is an error naming it.
func TestDelayFromEnvironment(t *testing.T) {
	cases := []struct {
		env  string
		max  time.Duration
		want time.Duration
		err  string
	}{
		{"", 0, 0, ""},
		{"150us", 0, 150 * time.Microsecond, ""},
		{"150us", -1, 0, ""},
		{"150us", time.Millisecond, time.Millisecond, ""},
		{"soon", 0, 0, `DEEPGO_SIM_DELAY="soon": want a non-negative Go duration`},
		{"-1ms", 0, 0, `DEEPGO_SIM_DELAY="-1ms"`},
	}
	for _, c := range cases {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv(sim.DelayEnv, c.env)
			b, err := sim.NewBackend(0, sim.Options{MaxDelay: c.max, Threads: 1})
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			defer b.Close()
			assert.Equal(t, c.want, b.MaxDelay())
			assert.Contains(t, b.Name(), "sim:0 (cpu(")
		})
	}
	_, err := sim.NewBackend(-1, sim.Options{})
	assert.ErrorContains(t, err, "dev = -1")
}
