// Package gloo is the Gloo backend of comm: one CPU process per rank, host
// tensors, collectives over Gloo's TCP transport (Debian's libgloo-dev,
// reached through a thin C shim; build tag gloo). Ranks meet through the
// job's rendezvous store (comm.Store), as the NCCL backend does.
//
// Every call first exchanges a small descriptor with the ranks taking part
// (Gloo's unbound buffers, under the call's deadline), so that a rank that
// never calls is named in an ErrTimeout, a rank calling something else in
// an ErrMismatch, and a rank whose own arguments were bad in an ErrAborted;
// this exchange is also Barrier, and the rendezvous that makes Send return
// only once the peer called Recv. Then Gloo runs the call with the time
// left as its timeout.
//
// Failures: when Gloo fails (a connection closed or reset, its deadline),
// the rank closes all its connections of the group, so that the peers
// waiting on it fail at once, and runs a post-mortem through the store:
// every survivor reports under the call's key, and the ranks that do not
// report by the call's deadline plus 2 s are named (ErrAborted for a lost
// connection, ErrTimeout for Gloo's deadline). A rank that left the group
// after blaming another is resolved to the one it blamed, and a store that
// fails too names the rank serving it (rank 0 under FromEnvOf). So a
// process that dies makes every other rank's call fail within its deadline
// plus that window, naming the dead rank. SIGPIPE is ignored from the
// first group on: Gloo writes from its own threads, where a dead peer's
// SIGPIPE would otherwise kill the process.
//
// Reductions: float16 and bfloat16 are widened to float32, reduced, and
// rounded once; Avg then scales the rounded sum by 1/Size(), as comm/local
// does. AllReduce is Gloo's ring all-reduce: each chunk of the buffer is
// summed around the ring starting at a different rank, so float sums over
// more than two ranks differ from comm/local's rank order in the last bits
// (two ranks, integers, Max and Min match it bit for bit). ReduceScatter
// all-reduces a copy and keeps this rank's chunk (Gloo 2022 has no
// reduce-scatter over plain buffers): twice the traffic of a true one.
// Reduce works on a copy on the ranks other than the root, whose tensors
// stay unchanged.
//
// Cancellation: a cancelled context aborts the descriptor exchange at once
// (ErrAborted naming the rank that cancelled; the group is then broken,
// and its peers' connections are left to their own deadlines). Past the
// exchange, inside Gloo's collective, a cancel is seen only when the call
// ends (Gloo takes a timeout, not a cancellation). Collectives of one
// group run one at a time in call order; Send and Recv run beside them.
//
// A build without the tag still compiles: every constructor returns an
// error wrapping comm.ErrUnsupported that says how to get Gloo.
package gloo

import "time"

// Options tune a Gloo communicator.
type Options struct {
	// Timeout is the deadline of every operation (0: comm.DefaultTimeout).
	Timeout time.Duration
	// Iface is the network interface Gloo's TCP transport binds, e.g.
	// "eth0" ("": the environment's GLOO_SOCKET_IFNAME, as PyTorch reads
	// it; if that is empty too, see Hostname).
	Iface string
	// Hostname is the name or address Gloo's TCP transport binds when no
	// interface is named ("": FromEnvOf binds 127.0.0.1 when MASTER_ADDR
	// is a loopback address, every rank being on this machine; otherwise
	// the address this host's name resolves to).
	Hostname string
	// Threads sizes the C pool that widens and rounds float16 and
	// bfloat16 around the float32 reductions; 0: one per CPU.
	Threads int
}
