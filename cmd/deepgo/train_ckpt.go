package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/deepgo-ml/deepgo"
	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/data"
)

// trainState is what deepgo train keeps in a checkpoint beside the engine's
// state (the engine's client_state): where each rank's sampler stands.
type trainState struct {
	Sampler data.Position `json:"sampler"`
}

// resumeDir is where a run resumes from: checkpoint.load_path when set,
// else checkpoint.save_dir (the recovery the user's document describes:
// load the latest checkpoint).
func resumeDir(cfg *config.Config) string {
	if p := cfg.Checkpoint.LoadPath; p != nil && *p != "" {
		return *p
	}
	return cfg.Checkpoint.SaveDir
}

// resume loads the latest checkpoint under resumeDir when there is one,
// restores the sampler, and returns the first step still to run.
func resume(ctx context.Context, cfg *config.Config, e deepgo.Trainer, s *data.DistributedSampler) (int, error) {
	dir := resumeDir(cfg)
	if dir == "" {
		return 1, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "latest")); errors.Is(err, fs.ErrNotExist) {
		return 1, nil
	}
	res, err := e.Load(ctx, dir, deepgo.LoadOptions{})
	if err != nil {
		return 0, fmt.Errorf("resume from %s: %w", dir, err)
	}
	var st trainState
	if err := json.Unmarshal(res.ClientState, &st); err != nil {
		return 0, fmt.Errorf("resume from %s: client state: %w", dir, err)
	}
	if err := s.SetPosition(st.Sampler); err != nil {
		return 0, fmt.Errorf("resume from %s: sampler: %w", dir, err)
	}
	return e.GlobalSteps() + 1, nil
}

// save writes a checkpoint under checkpoint.save_dir (tag global_step<N>,
// keep_n_most_recent rotation as configured).
func save(ctx context.Context, cfg *config.Config, e deepgo.Trainer, s *data.DistributedSampler) error {
	client, err := json.Marshal(trainState{Sampler: s.Position()})
	if err != nil {
		return err
	}
	if err := e.Save(ctx, cfg.Checkpoint.SaveDir, deepgo.SaveOptions{ClientState: client}); err != nil {
		return fmt.Errorf("checkpoint to %s: %w", cfg.Checkpoint.SaveDir, err)
	}
	return nil
}
