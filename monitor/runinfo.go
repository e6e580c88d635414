package monitor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// RunInfoFile is deepgo's one file in a run directory.
const RunInfoFile = "deepgo_run.json"

// RunInfo is deepgo_run.json: what a reader of the run directory needs
// besides the tags.
type RunInfo struct {
	// Config is the resolved DeepSpeed config (config.Config.JSON).
	Config json.RawMessage `json:"config"`
	// World is the number of ranks.
	World int `json:"world"`
	// Device is where the ranks computed: "cpu", "sim:0", "cuda:0".
	Device string `json:"device"`
	// Params is the model's parameter count.
	Params int64 `json:"params"`
	// EntropyFloor is the data's entropy rate in nats/token where known.
	EntropyFloor *float64 `json:"entropy_floor"`
	// MemoryCapacityBytes is the host RAM, or the device's memory on a GPU.
	MemoryCapacityBytes int64 `json:"memory_capacity_bytes"`
	// Steps is the optimizer steps planned (at start) or run (at the end).
	Steps int `json:"steps"`
}

// WriteRunInfo writes deepgo_run.json into every run directory (rank 0
// only; a no-op elsewhere or without an enabled monitor), replacing it
// whole so that a reader never sees half a file.
func (m *Monitor) WriteRunInfo(info RunInfo) error {
	if len(info.Config) == 0 {
		info.Config = json.RawMessage("null")
	}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("monitor: %s: %w", RunInfoFile, err)
	}
	b = append(b, '\n')
	for _, dir := range m.runDirs {
		tmp := filepath.Join(dir, RunInfoFile+".tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return fmt.Errorf("monitor: %w", err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, RunInfoFile)); err != nil {
			return fmt.Errorf("monitor: %w", err)
		}
	}
	return nil
}
