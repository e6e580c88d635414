// Package sim is a simulated device: a backend.Backend, backend.NN and
// optim.KernelSource whose memory Go code may not touch and whose kernels
// run asynchronously, in stream order, so that tests prove the engine's
// device path (copies, stream order, events, stream-ordered frees,
// collectives over device tensors) on a machine without a GPU.
//
// The rules it enforces, as a GPU would:
//
//   - Device memory is host memory from the C allocator, marked as
//     tensor.Sim(dev): tensor.Float32s, RawBytes and the other accessors
//     refuse it, and so does every check of the CPU backend. Data enters
//     and leaves only through Backend.Copy (or a collective of Comm).
//   - Kernels are queued on a Stream and run on its goroutine after the
//     call returned, using the CPU backend's C calls, so the results are
//     bit-identical to the CPU backend's. Argument errors are returned by
//     the call itself, the same *backend.ArgError the CPU backend gives
//     (with sim:N for cpu in the message). An error raised by a running
//     kernel (a token id out of range) is sticky, like a CUDA error: the
//     next Synchronize, copy into host memory or value-returning call
//     (SumSquares, NonFinite, optim's UnscaleCheck) returns it, naming the
//     kernel, and so does every later call.
//   - Streams and events behave like CUDA's: work on one stream runs in
//     order; Event.Record captures a stream's work so far, Stream.Wait
//     makes another stream (not the host) wait for it, Event.Synchronize
//     and Backend.Synchronize make the host wait, honouring ctx.
//   - Free is stream-ordered (cudaFreeAsync): the memory goes only after
//     the work issued before the Free on every stream of the device ran.
//   - CopyAsync (backend.HostStager) runs on a copy stream of its own,
//     after the work issued so far, while the host and the compute stream
//     go on. A host destination reads as NaN until the copy lands; a host
//     source changed or a host destination written before it ran fails it
//     with a sticky error. CopyStats counts the copies that ran while a
//     kernel did.
//
// Delay mode: with Options.MaxDelay, or DEEPGO_SIM_DELAY set to a Go
// duration ("200us") for the whole process, each kernel sleeps a random
// time in [0, MaxDelay) on its stream before running. A missing event or
// synchronization then reads stale data in tests instead of passing by
// luck of timing: CI reruns test tables with the variable set
// (DEEPGO_SIM_DELAY=200us go test ./sim/... and the engine's device
// tests). DEEPGO_SIM_SEED or Options.Seed seeds the delays.
//
// What it proves: that code never reads device memory from Go, copies
// what it needs, orders work across streams with events and frees in
// stream order, and computes the same bits as on the CPU. What it cannot:
// device memory capacity, allocation cost, PCIe or NVLink speed, kernel
// speed, the CUDA kernels' own correctness (package cuda tests those), or
// a collective's own stream order (Comm orders each operation after the
// stream's earlier work, but, as comm.Work allows, not the stream's later
// work after an Async operation).
package sim
