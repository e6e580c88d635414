package zero

import (
	"fmt"

	"github.com/deepgo-ml/deepgo/offload"
)

// EstimateZero2 is DeepSpeed's estimate_zero2_model_states_mem_needs
// (runtime/zero/stage_1_and_2.py): bytes per CPU (host) and per GPU for
// params, gradients and optimizer states of a model of totalParams with
// mixed-precision Adam. factor is additional_buffer_factor (1.5).
//
//	offload: GPU 2P, CPU P·max(4·G, 16)·factor
//	else:    GPU 2P + 18P/G, CPU 4P·gpusPerNode·factor      (G = all GPUs)
//
// (DeepSpeed 0.19's count: 2 bytes of fp16 parameters on every GPU, and 18
// per parameter partitioned: fp16 and fp32 gradients, fp32 master, two
// moments.)
func EstimateZero2(totalParams int64, gpusPerNode, nodes int, cpuOffload bool, factor float64) (cpu, gpu int64) {
	g := int64(gpusPerNode * nodes)
	p := float64(totalParams)
	if cpuOffload {
		return int64(p * float64(max(4*g, 16)) * factor), 2 * totalParams
	}
	return int64(p * 4 * float64(gpusPerNode) * factor), 2*totalParams + int64(18*p/float64(g))
}

// EstimateZero3 is DeepSpeed's estimate_zero3_model_states_mem_needs
// (runtime/zero/stage3.py) for largestLayer parameters in the largest
// module; it returns bytes per CPU and per GPU and the largest-layer
// working memory 4L.
func EstimateZero3(totalParams, largestLayer int64, gpusPerNode, nodes int, cpuOffload, cpuOffloadParams, zeroInit bool, factor float64) (cpu, gpu, largest int64) {
	g := float64(gpusPerNode * nodes)
	gf := 1 / float64(nodes)
	p := float64(totalParams)
	largest = 4 * largestLayer
	gpn := float64(gpusPerNode)
	var c float64
	switch {
	case cpuOffload && cpuOffloadParams:
		gpu = largest
		if zeroInit {
			c = p * 18 * gf * factor
		} else {
			c = p * max(4*gpn, 18*gf) * factor
		}
	case cpuOffload:
		gpu = largest + int64(2*p/g)
		if zeroInit {
			c = p * 16 * gf * factor
		} else {
			c = p * max(4*gpn, 16*gf) * factor
		}
	default:
		gpu = largest + int64(18*p/g)
		if zeroInit {
			c = float64(largestLayer) * 4 * gpn * factor
		} else {
			c = p * 4 * gpn * factor
		}
	}
	return int64(c), gpu, largest
}

// PaperModelStates is the ZeRO paper's per-rank model-state bytes for
// mixed-precision Adam (K = 12) over n ranks: stage 0 16Ψ, stage 1
// 4Ψ + 12Ψ/n, stage 2 2Ψ + 14Ψ/n, stage 3 16Ψ/n.
func PaperModelStates(stage int, psi int64, n int) int64 {
	p, N := float64(psi), float64(n)
	switch stage {
	case 1:
		return int64(4*p + 12*p/N)
	case 2:
		return int64(2*p + 14*p/N)
	case 3:
		return int64(16 * p / N)
	}
	return 16 * psi
}

// PlannedModelStates is what this package allocates per rank for the
// model states, from the layout: params (full or shard, 2 or 4 bytes),
// gradients (full or shard in accumBytes), fp32 master (half models only)
// and stateSlots fp32 optimizer tensors per owned element.
func PlannedModelStates(l *Layout, stage, modelBytes, accumBytes, stateSlots int) int64 {
	full := int64(l.Numel())
	shard := int64(l.ShardNumel())
	if stage == 0 {
		shard = full
	}
	var b int64
	if stage == 3 {
		b += shard * int64(modelBytes)
	} else {
		b += full * int64(modelBytes)
	}
	if stage <= 1 {
		b += full * int64(accumBytes)
	} else {
		b += shard * int64(accumBytes)
	}
	if modelBytes == 2 {
		b += shard * 4
	}
	return b + shard*4*int64(stateSlots)
}

// Placement is a rank's bytes by where they live: host memory, device
// memory, and swap files (NVMe offload).
type Placement struct{ Host, Device, Disk int64 }

// PlannedPlacement splits PlannedModelStates by where this package keeps
// each part on a device backend with offload_optimizer.device where:
//
//	none: everything on the device
//	cpu:  params and gradient buffers on the device; on the host the fp32
//	      master, the gradient chunk the step reads (accumBytes), the
//	      model-dtype weights it writes (half models) and the state
//	nvme: as cpu, but the state is on disk and the host holds buffers
//	      swap buffers of the largest sub-group's state (subGroupSize
//	      elements, or the whole shard), each padded to 4096 bytes, as
//	      many as the swap plan over the sub-groups fills (swap:
//	      buffer_count, pipeline_read, pipeline_write)
//
// (On the CPU backend Host is the sum and Device 0.)
func PlannedPlacement(l *Layout, stage, modelBytes, accumBytes, stateSlots int, where string, subGroupSize int, swap offload.PlanOptions) (Placement, error) {
	full := int64(l.Numel())
	shard := int64(l.ShardNumel())
	if stage == 0 {
		shard = full
	}
	params, grads := full*int64(modelBytes), shard*int64(accumBytes)
	if stage == 3 {
		params = shard * int64(modelBytes)
	}
	if stage <= 1 {
		grads = full * int64(accumBytes)
	}
	state := shard * 4 * int64(stateSlots)
	host := shard * 4 // the fp32 master, with offload
	if modelBytes != 4 {
		host += shard * int64(modelBytes)
	}
	host += shard * int64(accumBytes)
	switch where {
	case "none":
		return Placement{Device: PlannedModelStates(l, stage, modelBytes, accumBytes, stateSlots)}, nil
	case "cpu":
		return Placement{Host: host + state, Device: params + grads}, nil
	case "nvme":
		if swap.Buffers < 1 || subGroupSize < 1 {
			return Placement{}, fmt.Errorf("zero: nvme estimate: buffer_count %d and sub_group_size %d: want >= 1", swap.Buffers, subGroupSize)
		}
		group := max(min(int64(subGroupSize), shard), 1)
		buf := (group*4*int64(stateSlots) + 4095) &^ 4095
		// the store allocates a buffer at its first use: as many as the
		// swap plan over the sub-groups fills
		p, err := offload.NewPlan(int((shard+group-1)/group), swap)
		if err != nil {
			return Placement{}, fmt.Errorf("zero: nvme estimate: %w", err)
		}
		return Placement{Host: host + int64(p.BuffersUsed())*buf, Device: params + grads, Disk: state}, nil
	}
	return Placement{}, fmt.Errorf("zero: offload %q: allowed none, cpu, nvme", where)
}
