//go:build cuda

package cuda

import "github.com/deepgo-ml/deepgo/backend"

// The CUDA backend applies the CPU backend's argument rules, with the same
// *backend.ArgError messages, on device tensors.
var (
	argErr     = backend.ArgErr
	checkOne   = backend.CheckTensor
	list       = backend.CheckList
	listLike   = backend.CheckListLike
	floatList  = backend.CheckFloatList
	floatDType = backend.CheckFloatDType
	sameLens   = backend.CheckSameLens
	sameCounts = backend.CheckSameCounts
	firstDType = backend.FirstDType
	packArgs   = backend.CheckPack
)
