package gpu_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/deepgo-ml/deepgo/monitor/gpu"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The system's library: on a machine without a driver this is the note
// path (go-nvml's dlopen fails at Init, not at program start); on a GPU
// machine the readings must be physically sensible.
func TestOpenSystemLibrary(t *testing.T) {
	tel, err := gpu.Open(nil)
	require.NoError(t, err)
	defer func() { assert.NoError(t, tel.Close()) }()
	if !tel.Available() {
		t.Logf("no GPU telemetry here: %s", tel.Note())
		assert.Contains(t, tel.Note(), "GPU telemetry off")
		s, err := tel.Sample()
		assert.NoError(t, err)
		assert.Empty(t, s)
		return
	}
	ss, err := tel.Sample()
	require.NoError(t, err)
	require.NotEmpty(t, ss)
	for _, s := range ss {
		t.Logf("GPU %d %s: %d/%d bytes, %g%%, %g W, %g C, ECC %d/%d, missing %v",
			s.Index, s.Name, s.MemoryUsedBytes, s.MemoryTotalBytes, s.UtilizationPct, s.PowerW, s.TemperatureC, s.ECCCorrected, s.ECCUncorrected, s.Missing)
		assert.NotEmpty(t, s.UUID)
		assert.Greater(t, s.MemoryTotalBytes, uint64(1<<30))
		assert.LessOrEqual(t, s.MemoryUsedBytes, s.MemoryTotalBytes)
		assert.LessOrEqual(t, s.UtilizationPct, 100.0)
		assert.Greater(t, s.TemperatureC, 0.0)
		assert.Less(t, s.TemperatureC, 120.0)
	}
}

func TestNoLibraryIsANote(t *testing.T) {
	tel, err := gpu.Open(nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1")))
	require.NoError(t, err)
	assert.False(t, tel.Available())
	assert.Equal(t, "GPU telemetry off: libnvidia-ml.so.1 (the NVIDIA driver's management library) was not found", tel.Note())
	s, err := tel.Sample()
	assert.NoError(t, err)
	assert.Nil(t, s)
	assert.NoError(t, tel.Close())
}

func TestInitFailureIsANote(t *testing.T) {
	cases := []struct {
		name string
		lib  *mock.Interface
		note string
	}{
		{"driver not loaded", &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }},
			"GPU telemetry off: NVML did not initialise: ERROR_DRIVER_NOT_LOADED (NVML return 9)"},
		{"no devices", &mock.Interface{
			InitFunc:           func() nvml.Return { return nvml.SUCCESS },
			ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
			DeviceGetCountFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS }},
			"GPU telemetry off: NVML sees no GPU"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tel, err := gpu.Open(tc.lib)
			require.NoError(t, err)
			assert.False(t, tel.Available())
			assert.Equal(t, tc.note, tel.Note())
			assert.NoError(t, tel.Close())
			if tc.lib.ShutdownFunc != nil {
				assert.Len(t, tc.lib.ShutdownCalls(), 1, "NVML shut down once")
			}
		})
	}
}

// fake is a mocked NVML with two devices; device 1 has no power reading
// and two uncorrected ECC errors, device 0 raises XID 79 once.
type fake struct {
	lib    *mock.Interface
	devs   []*mock.Device
	events *mock.EventSet
	xids   []nvml.EventData
}

func newFake() *fake {
	f := &fake{}
	for i := range 2 {
		d := &mock.Device{
			GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS },
			GetUUIDFunc: func() (string, nvml.Return) { return []string{"GPU-aaa", "GPU-bbb"}[i], nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: 80 << 30, Used: uint64(i+1) << 30, Free: 80<<30 - uint64(i+1)<<30}, nvml.SUCCESS
			},
			GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
				return nvml.Utilization{Gpu: uint32(40 + i), Memory: 7}, nvml.SUCCESS
			},
			GetPowerUsageFunc: func() (uint32, nvml.Return) {
				if i == 1 {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
				return 312500, nvml.SUCCESS
			},
			GetTemperatureFunc: func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
				if s != nvml.TEMPERATURE_GPU {
					return 0, nvml.ERROR_INVALID_ARGUMENT
				}
				return uint32(55 + i), nvml.SUCCESS
			},
			GetTotalEccErrorsFunc: func(typ nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
				if c != nvml.VOLATILE_ECC {
					return 0, nvml.ERROR_INVALID_ARGUMENT
				}
				if typ == nvml.MEMORY_ERROR_TYPE_UNCORRECTED {
					return uint64(2 * i), nvml.SUCCESS
				}
				return 5, nvml.SUCCESS
			},
			RegisterEventsFunc: func(types uint64, _ nvml.EventSet) nvml.Return {
				if types != uint64(nvml.EventTypeXidCriticalError) || i == 1 {
					return nvml.ERROR_NOT_SUPPORTED
				}
				return nvml.SUCCESS
			},
		}
		f.devs = append(f.devs, d)
	}
	f.events = &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			if len(f.xids) == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			e := f.xids[0]
			f.xids = f.xids[1:]
			return e, nvml.SUCCESS
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	f.xids = []nvml.EventData{{Device: f.devs[0], EventType: uint64(nvml.EventTypeXidCriticalError), EventData: 79}}
	f.lib = &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(f.devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(n int) (nvml.Device, nvml.Return) { return f.devs[n], nvml.SUCCESS },
		EventSetCreateFunc:         func() (nvml.EventSet, nvml.Return) { return f.events, nvml.SUCCESS },
	}
	return f
}

func TestSampleReadsEveryDevice(t *testing.T) {
	f := newFake()
	tel, err := gpu.Open(f.lib)
	require.NoError(t, err)
	require.True(t, tel.Available())
	assert.Empty(t, tel.Note())

	ss, err := tel.Sample()
	require.NoError(t, err)
	want := []gpu.Sample{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-aaa", MemoryUsedBytes: 1 << 30, MemoryTotalBytes: 80 << 30,
			UtilizationPct: 40, PowerW: 312.5, TemperatureC: 55, ECCCorrected: 5, XIDs: []uint64{79}},
		{Index: 1, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-bbb", MemoryUsedBytes: 2 << 30, MemoryTotalBytes: 80 << 30,
			UtilizationPct: 41, TemperatureC: 56, ECCCorrected: 5, ECCUncorrected: 2, Missing: []string{"power", "xid"}},
	}
	assert.Equal(t, want, ss)
	assert.Equal(t, []gpu.Scalar{
		{"Train/GPU/memory_used_bytes", 1 << 30}, {"Train/GPU/memory_total_bytes", 80 << 30},
		{"Train/GPU/utilization_pct", 40}, {"Train/GPU/power_w", 312.5}, {"Train/GPU/temperature_c", 55},
	}, ss[0].Scalars())
	assert.Equal(t, []gpu.Scalar{
		{"Train/GPU/memory_used_bytes", 2 << 30}, {"Train/GPU/memory_total_bytes", 80 << 30},
		{"Train/GPU/utilization_pct", 41}, {"Train/GPU/temperature_c", 56},
	}, ss[1].Scalars(), "no power reading, no power tag")
	assert.Equal(t, []string{"GPU 0 (GPU-aaa): XID 79 error (see NVIDIA's XID table)"}, ss[0].Warnings())
	assert.Equal(t, []string{"GPU 1 (GPU-bbb): 2 uncorrected ECC memory errors since the driver loaded"}, ss[1].Warnings())

	// an XID is reported once
	ss, err = tel.Sample()
	require.NoError(t, err)
	assert.Empty(t, ss[0].XIDs)

	require.NoError(t, tel.Close())
	assert.Len(t, f.events.FreeCalls(), 1)
	assert.Len(t, f.lib.ShutdownCalls(), 1)
	ss, err = tel.Sample()
	assert.NoError(t, err)
	assert.Empty(t, ss, "closed")
}

func TestSampleChosenDevicesAndFailures(t *testing.T) {
	f := newFake()
	tel, err := gpu.Open(f.lib, 1)
	require.NoError(t, err)
	f.devs[1].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	ss, err := tel.Sample()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "gpu: device 1 memory: ERROR_GPU_IS_LOST")
	require.Len(t, ss, 1)
	assert.Equal(t, 1, ss[0].Index)
	assert.Equal(t, 56.0, ss[0].TemperatureC, "the other readings still come")
	assert.Equal(t, []string{"memory", "power", "xid"}, ss[0].Missing)
	require.NoError(t, tel.Close())

	_, err = gpu.Open(newFake().lib, 0, 2)
	require.EqualError(t, err, "gpu.Open: device index 2: NVML has devices 0..1")
	f = newFake()
	_, err = gpu.Open(f.lib, -1)
	require.Error(t, err)
	assert.Len(t, f.lib.ShutdownCalls(), 1, "a refused Open shuts NVML down")
}
