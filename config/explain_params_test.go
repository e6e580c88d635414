package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExplainParams: Explain's optimizer and scheduler tables agree with
// what ParseOptimizer and ParseScheduler accept: every param of every type
// is documented, a type listed as taking a param parses with it, and a type
// not listed refuses it.
func TestExplainParams(t *testing.T) {
	for _, typ := range explainOptimizerTypes {
		r, err := optimizerRuleFor(typ)
		require.NoError(t, err)
		for _, k := range r.keys {
			assert.Contains(t, optParamDocs, k, "%s takes %s: undocumented", typ, k)
		}
	}
	for k := range optParamDocs {
		out, err := Explain(optPrefix + k)
		require.NoError(t, err, k)
		assert.Contains(t, out, "taken by: ", k)
	}

	sample := func(key string) any {
		switch key {
		case keyWarmupType:
			return "linear"
		case keyCycleMomentum, keyLRRTStaircase:
			return false
		case keyCycleMinMom, keyCycleMaxMom:
			return 0.5
		case keyLastBatchIteration, keyDecayMomRate, keyDecayLRRate:
			return 0.0
		case keyTotalNumSteps:
			return 5000.0
		}
		return 1.0
	}
	required := map[string]map[string]any{
		"WarmupDecayLR":  {keyTotalNumSteps: 5000.0},
		"WarmupCosineLR": {keyTotalNumSteps: 5000.0},
		"OneCycle":       {keyCycleMinLR: 0.1, keyCycleMaxLR: 1.0},
	}
	types := []string{"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"}
	for key, sp := range schedParamDocs {
		takes := map[string]bool{}
		for _, td := range sp.types {
			takes[td[0]] = true
		}
		for _, typ := range types {
			params := map[string]any{}
			for k, v := range required[typ] {
				params[k] = v
			}
			params[key] = sample(key)
			_, err := ParseScheduler(typ, params, []float64{0.01}, true)
			if takes[typ] {
				assert.NoError(t, err, "%s with %s", typ, key)
			} else {
				assert.Error(t, err, "%s with %s: accepted, but Explain does not list it", typ, key)
			}
		}
		out, err := Explain(schedPrefix + key)
		require.NoError(t, err, key)
		assert.Contains(t, out, "taken by: ", key)
	}
	_, err := Explain("optimizer.params.lrr")
	assert.ErrorContains(t, err, `no optimizer deepgo implements takes "lrr"`)
	_, err = Explain("scheduler.params.warmup")
	assert.ErrorContains(t, err, `no scheduler deepgo implements takes "warmup"`)
}
