package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Sample is one device's readings at one moment.
type Sample struct {
	// Index is the device's NVML index; Name and UUID identify it.
	Index      int
	Name, UUID string
	// MemoryUsedBytes and MemoryTotalBytes are the device memory in use
	// (by every process) and its capacity.
	MemoryUsedBytes, MemoryTotalBytes uint64
	// UtilizationPct is the percentage of the last sample period (1/6 s to
	// 1 s, by product) during which a kernel ran.
	UtilizationPct float64
	// PowerW is the board's power draw in watts.
	PowerW float64
	// TemperatureC is the GPU die temperature in degrees Celsius.
	TemperatureC float64
	// ECCCorrected and ECCUncorrected count memory errors since the driver
	// loaded (NVML's volatile counters).
	ECCCorrected, ECCUncorrected uint64
	// XIDs are the critical XID errors (NVML's event data: the XID number)
	// the device raised since the previous Sample.
	XIDs []uint64
	// Missing names the readings the device does not expose ("memory",
	// "utilization", "power", "temperature", "ecc", "xid"); their fields
	// are zero.
	Missing []string
}

// Scalar is one monitor value of a Sample.
type Scalar struct {
	Tag   string
	Value float64
}

// Scalars are the Sample's monitor values under the Train/GPU tags, the
// missing readings left out.
func (s Sample) Scalars() []Scalar {
	miss := map[string]bool{}
	for _, m := range s.Missing {
		miss[m] = true
	}
	var out []Scalar
	add := func(reading, tag string, v float64) {
		if !miss[reading] {
			out = append(out, Scalar{tag, v})
		}
	}
	add("memory", "Train/GPU/memory_used_bytes", float64(s.MemoryUsedBytes))
	add("memory", "Train/GPU/memory_total_bytes", float64(s.MemoryTotalBytes))
	add("utilization", "Train/GPU/utilization_pct", s.UtilizationPct)
	add("power", "Train/GPU/power_w", s.PowerW)
	add("temperature", "Train/GPU/temperature_c", s.TemperatureC)
	return out
}

// Warnings describe what in the Sample needs attention: XID errors and
// uncorrected ECC errors, each naming the device.
func (s Sample) Warnings() []string {
	var w []string
	if s.ECCUncorrected > 0 {
		w = append(w, fmt.Sprintf("GPU %d (%s): %d uncorrected ECC memory errors since the driver loaded", s.Index, s.UUID, s.ECCUncorrected))
	}
	for _, x := range s.XIDs {
		w = append(w, fmt.Sprintf("GPU %d (%s): XID %d error (see NVIDIA's XID table)", s.Index, s.UUID, x))
	}
	return w
}

// Sample reads every watched device. A reading the device does not offer
// (NVML's not-supported) is listed in Missing; any other NVML failure is
// returned, joined across devices, with every reading that did succeed.
// A Telemetry that is not Available returns nothing.
func (t *Telemetry) Sample() ([]Sample, error) {
	if len(t.devs) == 0 {
		return nil, nil
	}
	errs := t.drainXIDs()
	out := make([]Sample, 0, len(t.devs))
	for _, d := range t.devs {
		s := Sample{Index: d.index, Name: d.name, UUID: d.uuid, XIDs: d.xidsSince}
		d.xidsSince = nil
		read := func(reading string, ret nvml.Return) bool {
			switch ret {
			case nvml.SUCCESS:
				return true
			case nvml.ERROR_NOT_SUPPORTED:
				s.Missing = append(s.Missing, reading)
			default:
				errs = append(errs, fmt.Errorf("gpu: device %d %s: %s", d.index, reading, errorString(ret)))
				s.Missing = append(s.Missing, reading)
			}
			return false
		}
		if m, ret := d.h.GetMemoryInfo(); read("memory", ret) {
			s.MemoryUsedBytes, s.MemoryTotalBytes = m.Used, m.Total
		}
		if u, ret := d.h.GetUtilizationRates(); read("utilization", ret) {
			s.UtilizationPct = float64(u.Gpu)
		}
		if mw, ret := d.h.GetPowerUsage(); read("power", ret) {
			s.PowerW = float64(mw) / 1000
		}
		if c, ret := d.h.GetTemperature(nvml.TEMPERATURE_GPU); read("temperature", ret) {
			s.TemperatureC = float64(c)
		}
		corr, ret := d.h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
		unc, ret2 := d.h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		if ret == nvml.SUCCESS && ret2 != nvml.SUCCESS {
			ret = ret2
		}
		if read("ecc", ret) {
			s.ECCCorrected, s.ECCUncorrected = corr, unc
		}
		if !d.xid {
			s.Missing = append(s.Missing, "xid")
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// drainXIDs collects the XID events waiting in the event set, without
// blocking, into their devices.
func (t *Telemetry) drainXIDs() []error {
	if t.events == nil {
		return nil
	}
	for {
		ev, ret := t.events.Wait(0)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			return nil
		default:
			return []error{fmt.Errorf("gpu: reading XID events: %s", errorString(ret))}
		}
		if ev.EventType&uint64(nvml.EventTypeXidCriticalError) == 0 {
			continue
		}
		if d := t.deviceOf(ev.Device); d != nil {
			d.xidsSince = append(d.xidsSince, ev.EventData)
		}
	}
}

// deviceOf finds the watched device an event came from: by handle, else
// by UUID.
func (t *Telemetry) deviceOf(h nvml.Device) *device {
	for _, d := range t.devs {
		if d.h == h {
			return d
		}
	}
	if h == nil {
		return nil
	}
	uuid, ret := h.GetUUID()
	for _, d := range t.devs {
		if ret == nvml.SUCCESS && d.uuid == uuid {
			return d
		}
	}
	return nil
}
