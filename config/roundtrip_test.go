package config

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/deepgo-ml/deepgo/internal/shareddata"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refusedConfigs are the collections' files DeepSpeed loads but deepgo's
// validation refuses, with why. Every other file DeepSpeed loads must parse
// cleanly and round-trip.
var refusedConfigs = map[string]string{
	"CoinCheung__gdGPT__configs__ds_config.json":                                                                       "Lion's use_triton parameter",
	"THUDM__GLM__scripts__ds_onebit_config.json":                                                                       "OneBitAdam",
	"microsoft__DeepSpeedExamples__bing_bert__deepspeed_bsz4k_onebit_config_seq128.json":                               "OneBitAdam",
	"microsoft__DeepSpeedExamples__compression__bert__config__ds_config_TEMPLATE.json":                                 "template placeholders",
	"microsoft__DeepSpeedExamples__training__bing_bert__01_adam__nccl__deepspeed_bsz4k_01adam_config_seq128_nccl.json": "ZeroOneAdam",
	"microsoft__Megatron-DeepSpeed__examples_deepspeed__offload_pp__ds_config_gpt_TEMPLATE.json":                       "template placeholders",
	"5.1-175b.json": "nvme offload without nvme_path, ZeRO-3 with pipeline parallelism",
	"microsoft__DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config.json":        "misspelled zero_optimization.stage3_param_persitence_threshold, which DeepSpeed's pydantic section rejects",
	"microsoft__DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_infinity_config.json": "misspelled zero_optimization.stage3_param_persitence_threshold, which DeepSpeed's pydantic section rejects",
}

// TestRoundTripCollections round-trips every config of ../shared/configs
// (or $DEEPGO_CONFIGS) and ../shared/seed/configs that DeepSpeed loads:
// the files its MANIFEST.tsv marks as loading (every file where there is
// no manifest) less refusedConfigs, which must fail validation instead.
// Each must parse, so the count round-tripped is the manifest's.
func TestRoundTripCollections(t *testing.T) {
	dirs := shareddata.ConfigDirs(t)
	n, want := 0, 0
	for _, dir := range dirs {
		for _, name := range loadableConfigs(t, dir) {
			b, err := os.ReadFile(filepath.Join(dir, name))
			require.NoError(t, err)
			cfg, err := Parse(b)
			if why, ok := refusedConfigs[name]; ok {
				var es Errors
				assert.ErrorAs(t, err, &es, "%s: want validation errors (%s)", name, why)
				continue
			}
			want++
			if !assert.NoError(t, err, "%s: DeepSpeed loads it, deepgo", name) {
				continue
			}
			t.Run(name, func(t *testing.T) { checkRoundTrip(t, cfg) })
			n++
		}
	}
	if n == 0 || n != want {
		t.Fatalf("%d configs round-tripped, want %d (of %v)", n, want, dirs)
	}
	t.Logf("%d configs round-tripped", n)
}

// loadableConfigs lists the files of dir that DeepSpeed loads: the rows of
// its MANIFEST.tsv so marked, else every config file there.
func loadableConfigs(t *testing.T, dir string) []string {
	var names []string
	if rows, ok := readManifest(t, dir); ok {
		for name, row := range rows {
			if row.hjson == "ok" {
				names = append(names, name)
			}
		}
	} else {
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range ents {
			if !e.IsDir() && !strings.HasSuffix(e.Name(), ".md") {
				names = append(names, e.Name())
			}
		}
	}
	sort.Strings(names)
	return names
}
