// Package doctor applies the user's diagnosis table (the DeepSpeed guide's
// §4.2: out of memory, slow training, loss spikes, pipeline bubbles) and its
// §6 targets to a measured run and to deepgo's memory estimator.
//
// Each rule is a pure function of an Input (a run as package rundir reads
// it, and its config); it reports what it measured and, when the run misses
// a target, a Finding that carries the numbers that triggered it and advice
// with the change's estimated effect. `deepgo doctor` prints them.
package doctor
