# deepgo build entry points. `make test` is the README's test command and what
# CI runs; `make deps` installs the system packages the C core links against.
GO      ?= go
GOFLAGS ?=
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PKGS := liburing-dev libopenblas-dev libopenmpi-dev openmpi-bin libgloo-dev cmake ninja-build

.PHONY: all build deps test test-gloo test-go test-c test-c-asan test-go-asan sanitize lint vet staticcheck bench bench-offload demo selftest cuda-deps cuda-toolchain cuda gpu-check mkl test-mkl test-openblas clean

all: build

## GO_TAGS: gloo when Debian's libgloo-dev is installed (comm/gloo then
## links it; without the tag comm/gloo says how to get it)
GO_TAGS ?= $(shell test -f /usr/include/gloo/allreduce.h && echo gloo)

build:
	$(GO) build -tags '$(GO_TAGS)' ./...

## deps: install missing system packages (Debian/Ubuntu, as root or via sudo)
deps:
	@missing=""; for p in $(APT_PKGS); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	else echo "make deps: all of $(APT_PKGS) present"; fi

## test: everything plain CI runs (no GPU needed)
test: lint test-c test-go test-gloo

## test-gloo: comm/gloo's multi-process tests (2 and 4 processes of the test
## binary on loopback, faults included) under the race detector, when Gloo
## is installed; test-go has already checked the build without it
test-gloo:
	@if [ "$(findstring gloo,$(GO_TAGS))" ]; then \
	  $(GO) vet -tags gloo ./comm/gloo/... ./examples/bench-comm/ ./cmd/deepgo/ && \
	  $(GO) test -race -count=1 -timeout 15m -tags gloo ./comm/gloo/... && \
	  $(GO) test -race -count=1 -timeout 10m -tags gloo -run 'Launch' ./cmd/deepgo/; \
	else echo "make test-gloo: no Gloo (/usr/include/gloo/allreduce.h); make deps installs libgloo-dev"; fi

## STATICCHECK_VERSION: the module's semver tag (release 2026.2.2 is v0.8.2;
## the proxy no longer answers a query by the release name)
STATICCHECK_VERSION ?= 0.8.2
STATICCHECK := $(shell go env GOPATH)/bin/staticcheck

lint: vet staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## staticcheck: installed from the Go module proxy at a pinned version
staticcheck:
	@$(STATICCHECK) -version 2>/dev/null | grep -qF '($(STATICCHECK_VERSION))' || \
	  $(GO) install honnef.co/go/tools/cmd/staticcheck@v$(STATICCHECK_VERSION)
	$(STATICCHECK) ./...

vet:
	$(GO) vet ./...

## test-go: every Go test under the race detector, then the simulated
## device's tables again in its randomized delay mode (package sim).
test-go:
	$(GO) test -race -timeout 20m ./...
	DEEPGO_SIM_DELAY=200us $(GO) test -race -count=1 ./sim/...

test-c:
	cmake -S . -B build/cmake -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build/cmake
	ctest --test-dir build/cmake --output-on-failure

## test-c-asan: the C core and its ctest suite built with
## -fsanitize=address,undefined (CMake's DEEPGO_SANITIZE) in a build dir of its own
test-c-asan:
	cmake -S . -B build/cmake-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPGO_SANITIZE=ON >/dev/null
	cmake --build build/cmake-asan
	ctest --test-dir build/cmake-asan --output-on-failure

## test-go-asan: the Go tests of the packages that drive the C core, with
## cgo's C and the Go code under AddressSanitizer (LeakSanitizer at exit).
## ASan slows pure-Go arithmetic ~25x, so tables whose cost is Go reference
## math over large data stay with the plain run: optim's float64 reference
## (test-c-asan runs those kernels in test_optim), comm/local's determinism
## repeats and its tables past 1001 elements (test_reduce covers the
## threaded reduction). Also skipped: three root tests whose failed
## Initialize leaves the model's donated tensors to the test, which drops
## them (model.Param.Donate), so LeakSanitizer reports the test's leak.
ASAN_PKGS := ./csrc ./aio ./offload ./tensor ./backend ./optim ./comm/local ./sim ./zero ./nn ./checkpoint .
ASAN_SKIP := ^(TestStepMatchesFloat64Reference|TestDeterministic|TestReductions|TestDataMovement)$$
ASAN_LEN  := (0|1|7|64|129|1001)
ASAN_LOCAL_RUN := ^Test(Reductions|DataMovement)$$/./.*/^([a-z]+|len=$(ASAN_LEN))$$/^len=$(ASAN_LEN)$$
test-go-asan:
	$(GO) test -asan -short -count=1 -timeout 15m -skip '$(ASAN_SKIP)' $(ASAN_PKGS)
	$(GO) test -asan -short -count=1 -timeout 15m -run '$(ASAN_LOCAL_RUN)' ./comm/local

## sanitize: both of the above (CI runs it after `make test`): 5.5 minutes
## on 2 cores from cold caches, of which 2.5 are the Go tests
sanitize: test-c-asan test-go-asan

bench:
	$(GO) run ./examples/bench-kernels

## bench-offload: step time with NVMe optimizer offload against in-memory and
## the share of swap I/O hidden (JSON); BENCH_DIR is a folder on the disk to measure
BENCH_DIR ?= /tmp
bench-offload:
	$(GO) run ./examples/bench-offload -dir $(BENCH_DIR)

selftest:
	$(GO) run ./cmd/deepgo selftest

## demo: the README's main job: a small GPT on 2 in-process ranks, ZeRO-2, CPU
demo:
	$(GO) run ./cmd/deepgo train --config configs/demo-zero2.json

## CUDA_VERSIONS: the CUDA toolchains `make cuda` builds with, each from
## NVIDIA's PyPI wheels: 13.0 with nvcc (into ./.cuda, or DG_CUDA_DIR; a
## system nvcc when one is on PATH), 12.9 and 11.8 with clang-19's CUDA
## front end (into ~/.cache/deepgo/cuda-<version>). build-cuda.sh's header
## lists each one's targets. `make cuda CUDA_VERSIONS=13.0` builds one.
CUDA_VERSIONS ?= 13.0 12.9 11.8
CUDA_APT_PKGS := clang-19

## cuda-deps: clang-19 for the 12.9 and 11.8 builds (Debian/Ubuntu)
cuda-deps:
	@if [ "$(filter-out 13.0,$(CUDA_VERSIONS))" ] && ! dpkg -s $(CUDA_APT_PKGS) >/dev/null 2>&1; then \
	  echo "make cuda-deps: installing $(CUDA_APT_PKGS)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(CUDA_APT_PKGS); \
	fi

cuda-toolchain:
	@for v in $(CUDA_VERSIONS); do DG_CUDA_VERSION=$$v bash scripts/cuda-toolchain.sh || exit 1; done

## cuda: compile and link every .cu file with each of CUDA_VERSIONS, then
## (with 13.0, into build/cuda) the Go binaries gpu-check runs: the root
## package's tests, bench-train, bench-adam (-tags cuda); no GPU needed
cuda: cuda-deps cuda-toolchain
	@for v in $(CUDA_VERSIONS); do DG_CUDA_VERSION=$$v bash scripts/build-cuda.sh || exit 1; done
	@case " $(CUDA_VERSIONS) " in *" 13.0 "*) bash scripts/build-gpu-binaries.sh ;; esac

## mkl: Intel MKL's runtime from PyPI's wheel into ~/.cache/deepgo/mkl
## (DG_MKL_DIR); DEEPGO_BLAS=<the path it prints> runs the nn products on it
mkl:
	@bash scripts/install-mkl.sh

## test-mkl: the packages whose results go through sgemm, on MKL
test-mkl:
	@lib=$$(bash scripts/install-mkl.sh) && \
	DEEPGO_BLAS=$$lib DEEPGO_TEST_MKL=$$lib $(GO) test -count=1 ./csrc ./backend ./nn ./sim ./examples/bench-train

## test-openblas: the same packages with every product on OpenBLAS
## (DEEPGO_BLAS=openblas): on an Intel CPU with AVX-512, make test runs the
## Linear products on nn_gemm.c, and this covers OpenBLAS's path there
test-openblas:
	DEEPGO_BLAS=openblas $(GO) test -count=1 ./csrc ./backend ./nn ./sim ./examples/bench-train

## gpu-check: on a GPU machine, compare every CUDA kernel with its CPU twin
## and run the cuda and nccl Go tests; fails ("no GPU") without one, and on
## any GPU test that did not run
gpu-check:
	bash scripts/gpu-check.sh

clean:
	rm -rf build
