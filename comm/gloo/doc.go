// Package gloo is the Gloo backend of comm: one CPU process per rank, host
// tensors, collectives over Gloo's TCP transport (Debian's libgloo-dev,
// reached through a thin C shim; build tag gloo). Ranks meet through the
// job's rendezvous store (comm.Store), as the NCCL backend does.
//
// A build without the tag still compiles: every constructor returns an
// error wrapping comm.ErrUnsupported that says how to get Gloo.
package gloo

import "time"

// Options tune a Gloo communicator.
type Options struct {
	// Timeout is the deadline of every operation (0: comm.DefaultTimeout).
	Timeout time.Duration
	// Iface is the network interface Gloo's TCP transport binds
	// (GLOO_SOCKET_IFNAME; "" picks the address the hostname resolves to,
	// or loopback when every rank runs on this machine).
	Iface string
	// Hostname is the address Gloo's TCP transport binds ("" : see Iface).
	Hostname string
	// Threads sizes the C pool that widens and rounds float16 and
	// bfloat16 around the float32 reductions; 0: one per CPU.
	Threads int

	// storeHost is 1 + the world rank serving the store (FromEnvOf: rank
	// 0), 0 when unknown.
	storeHost int
}

// noGlooHint says how to get a build with Gloo.
const noGlooHint = "this build has no Gloo: install Debian's libgloo-dev (apt install libgloo-dev) and build with -tags gloo (make build adds the tag when Gloo is installed)"
