// Package data supplies token streams to trainers: token-id columns of
// Arrow IPC files (what Hugging Face datasets store) and Parquet files, raw
// text as bytes (vocabulary 256), and a synthetic Markov corpus whose
// entropy rate is known exactly, so a trainer can report its loss against
// the floor no model can beat. A DistributedSampler hands each
// data-parallel rank its shard of fixed-length windows in a deterministic
// shuffled order, resumable from a JSON position.
package data
