// Package checkpoint saves and loads deepgo training state the way
// DeepSpeed lays it out, in files any safetensors reader can open, with
// atomic, durable commits and verified loads.
//
// Layout of a save directory (checkpoint.save_dir):
//
//	<dir>/latest                  the newest durable tag, then its CRC-32C:
//	                              "global_step10\ncrc32c=1a2b3c4d\n"; a
//	                              DeepSpeed latest (the tag alone) is read too
//	<dir>/<tag>/manifest.json     {"crc32c":"…","manifest":{…}}: tag, step,
//	                              world, topology, ZeRO stage, config,
//	                              parameter map, and per rank its files (size,
//	                              CRC-32C), tensors (dtype, shape, shard
//	                              placement) and small state (Meta)
//	<dir>/<tag>/zero_pp_rank_R_mp_rank_00_<group>_states.safetensors
//	                              rank R's tensors of one group ("model",
//	                              "optim", ...) with checkpoint_type sharded
//	<dir>/<tag>/zero_pp_rank_R_mp_rank_00_states.safetensors
//	                              rank R's only file with checkpoint_type blob
//	<dir>/.tmp.<tag>/             a save in progress (never read)
//	<dir>/.deleted.<tag>/         a checkpoint being removed (never read)
//
// The tag defaults to global_step<N> as in DeepSpeed.
//
// Sharded tensors. A ZeRO partition is saved as each rank's piece of a
// flat vector, with the vector's length and the piece's offset (Shard).
// Any range of the vector can be read back (Checkpoint.ReadRange) from
// whichever pieces hold it, which is all resharding needs: a checkpoint
// of W data-parallel ranks loads into W' ranks (W' = 1 included) by each
// new rank reading its own range (see Partition). Whole tensors (Shard
// nil) are saved by one rank, usually rank 0.
//
// Tensor-parallel shards. A parameter split by tensor parallelism is
// placed by its full shape and one piece per TP rank (ParamRef.Split, cut
// as model.TPLayout.Runs says); ReadParam and Consolidate put the full
// tensor back together, from which a loader cuts the shards of any other
// TP degree.
//
// Guarantees. Save writes into .tmp.<tag>, syncs every file, writes the
// manifest last, syncs, renames the directory into place, syncs the
// parent, replaces latest atomically, and only then rotates out old
// checkpoints (keep_n_most_recent). A crash at any moment leaves the
// previous checkpoint and latest intact. Open verifies the manifest's
// checksum and structure; every data file is verified (size, CRC-32C,
// header against manifest) before any of its bytes is returned, and every
// error names the file and what is wrong, wrapping ErrCorrupt or
// fs.ErrNotExist. Every single-bit change of latest, manifest.json or a
// data file is detected.
//
// Collectives. Save, AgreeTag and VerifyReplicated are collectives over a
// comm.Comm: a rank missing or calling something else makes every rank
// fail within the group's timeout instead of hanging; a failure on one
// rank makes every rank fail with a *comm.RankError naming it. AsyncSaver
// runs saves in the background on a group of its own (and, with
// AsyncOptions.Outcome, agrees on each one's outcome over a second group,
// so that ranks that write nothing learn it).
//
// Files go through vfs.FS, so tests inject faults (vfs.DiskFull,
// vfs.OnOp) and check what a failed save leaves behind.
package checkpoint
