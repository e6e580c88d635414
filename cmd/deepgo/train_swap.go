package main

import (
	"errors"
	"os"

	"github.com/deepgo-ml/deepgo/config"
	"github.com/deepgo-ml/deepgo/offload"
)

// swapFolders are the NVMe swap folders the engine of world rank makes
// under cfg's nvme_paths: the optimizer state's (offload_optimizer device
// nvme, ZeRO stages 1-3) and stage 3's parameters' (offload_param device
// nvme). The engines name them by the world rank (deepgo train's rank).
func swapFolders(cfg *config.Config, rank int) []string {
	var dirs []string
	if o, err := offload.NVMeOptionsFromConfig(cfg, rank); err == nil && cfg.ZeroOptimization.Stage >= 1 {
		dirs = append(dirs, offload.SwapDir(o.Path, o.Rank))
	}
	if o, err := offload.ParamSwapOptionsFromConfig(cfg, rank); err == nil && cfg.ZeroOptimization.Stage == 3 {
		dirs = append(dirs, offload.ParamSwapDir(o.Path, o.Rank))
	}
	return dirs
}

// removeSwapFolders deletes rank's swap folders and their lock files: on
// an interrupt the process exits without closing its engines, which would
// have removed them, and the files are as large as the optimizer state
// or the parameters. (Files still open are freed when the process ends.)
func removeSwapFolders(cfg *config.Config, rank int) error {
	var errs []error
	for _, d := range swapFolders(cfg, rank) {
		errs = append(errs, os.RemoveAll(d))
		if err := os.Remove(d + ".lock"); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
