// Package rundir reads a training run directory as deepgo's monitor writes
// it: DeepSpeed's csv_monitor layout (one CSV file per tag under
// output_path/job_name, header "step,<last tag component>", one "step,value"
// row per event) plus deepgo_run.json, the run's facts (resolved config,
// world, device, parameter count, entropy floor, memory capacity, steps,
// train_batch_size, train_loss_after_step); and the scalars of tensorboard
// event files in the same directory, for a run that wrote no CSV files
// (ReadEvents).
//
// As in DeepSpeed, the step column of a Train/Samples tag holds
// global_samples (XAxis), that of deepgo's own tags the optimizer step.
// Read turns global_samples back into steps (dividing by deepgo_run.json's
// train_batch_size, or for a directory DeepSpeed wrote, by the one its
// values imply, with train_loss one step later for a pipeline run), so
// that every series of a Run is keyed on steps; a
// directory from a deepgo that wrote steps everywhere (deepgo_run.json
// without train_batch_size) reads as it is.
//
// One train_batch_size holds for the whole directory: rows written by a
// run resumed at another batch size (another world size), or by a deepgo
// that wrote steps before a newer one resumed into the same job folder,
// are divided by the newest and read wrong or fail Read naming the file;
// give such a resumed run its own job_name (deepgo train refuses to resume
// into a directory whose deepgo_run.json records another batch:
// monitor.Monitor.WriteRunInfo). For a directory DeepSpeed
// wrote, the batch is the greatest common divisor of the Train/Samples
// values, which a changed batch size or a single logged step also fools.
//
// It only reads; package doctor diagnoses a run and package runplot draws it.
package rundir
