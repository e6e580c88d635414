// Package rundir reads a training run directory as deepgo's monitor writes
// it: DeepSpeed's csv_monitor layout (one CSV file per tag under
// output_path/job_name, header "step,<last tag component>", one "step,value"
// row per event) plus deepgo_run.json, the run's facts (resolved config,
// world, device, parameter count, entropy floor, memory capacity, steps).
//
// It only reads; package doctor diagnoses a run and package runplot draws it.
package rundir
