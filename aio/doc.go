// Package aio is deepgo's asynchronous file I/O engine: it moves whole
// requests between 4 KiB-aligned host buffers and files opened O_DIRECT,
// through the C core's io_uring engine (csrc/aio*.c), or through its
// pread/pwrite thread pool where the kernel refuses io_uring.
//
// A request is split in C into block_size pieces kept queue_depth deep per
// worker; Go hears of it once, when the whole request is done, from one
// goroutine per engine that reaps completions in batches. Nothing crosses
// into C per piece.
//
// O_DIRECT wants sizes and offsets in multiples of 4096 (Align). Offsets
// must be; sizes are padded: a write of n bytes writes n rounded up to 4096,
// the padding zeroed, and a read reads the padded length into the buffer,
// whose capacity is always a multiple of 4096. A file written by this
// package therefore always holds whole 4096-byte blocks.
//
// The environment variable DEEPGO_AIO=threads|uring|auto overrides the back
// end of engines opened with BackendAuto (tests force the fallback with it).
package aio
