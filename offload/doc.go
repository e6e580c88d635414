// Package offload moves optimizer state out of memory. Its NVMe swapper
// (NVMeStore, an optim.StateStore) keeps each sub-group's state in a file
// under nvme_path and pages it through a few aligned host buffers with the
// asynchronous I/O engine (package aio): a sub-group's state is read before
// its step and written after, and with pipeline_read the next sub-group's
// read runs while the current one steps.
//
// What happens when is decided by a pure planner (Plan, table-tested) over
// the order the sub-groups step in; NVMeStore only carries the plan out.
package offload
