# framechain: `make` builds ./framechain; `make test` runs the test suite.
# Without nvcc the build is CPU-only; with nvcc (or NVCC=/path/to/nvcc) the CUDA backend is compiled
# too. NO_CUDA=1 forces a CPU-only build. CUDA_ARCH overrides the GPU architectures.

CC      ?= gcc
COMMA   := ,
# make clean and make help need none of the checks below (OpenBLAS, zlib, nvcc).
NO_CHECKS := $(filter help clean,$(MAKECMDGOALS))
# The Python with numpy and torch for the reference checks: Debian's, else the one on PATH; else one
# with numpy alone (the suites that need torch then say so).
PYTHON  ?= $(shell for m in 'numpy, torch' numpy; do for p in /usr/bin/python3 python3; do \
             $$p -c "import $$m" 2>/dev/null && echo $$p && exit; done; done)
BUILD   ?= build
OPT     ?= -O3
# -fno-trapping-math: no floating-point trap is ever enabled, so comparisons may become selects and
# loops with range checks vectorise (src/backend/cpu/exp_poly.h); the results are the same IEEE roundings.
# -ffp-contract=off: a multiply and an add stay two roundings even where the target has FMA (the
# AVX-512 clones of exp_poly.h), so every clone of a loop gives the same bytes.
CFLAGS  ?= $(OPT) -g -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Wno-format-truncation \
           -std=gnu11 -fopenmp -fno-trapping-math -ffp-contract=off
LDLIBS  := -lm
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# The program: ./framechain from the default build folder; from another (BUILD=dir), dir/framechain, so
# that two build folders never take turns at one ./framechain that each then thinks up to date
BIN     ?= $(if $(filter build build/,$(BUILD)),framechain,$(BUILD)/framechain)
ifeq ($(SAN),1)
  BIN := $(BUILD)/framechain
  CFLAGS += $(SAN_FLAGS)
  LDFLAGS += $(SAN_FLAGS)
  NO_CUDA := 1
  NO_MPI := 1
endif

# ---- required: OpenBLAS through CBLAS (found by compiling against it, not by asking dpkg) ----
# The OpenMP build of OpenBLAS (libopenblas-openmp-dev) shares our OpenMP thread pool; the pthread
# build works too, but its threads spin against ours. Prefer the former where it is installed.
BLAS_PC     := $(firstword $(wildcard /usr/lib/*/openblas-openmp/pkgconfig/openblas.pc) openblas)
BLAS_CFLAGS := $(shell pkg-config --cflags $(BLAS_PC) 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs $(BLAS_PC) 2>/dev/null || echo -lopenblas)
BLAS_LIBS   += $(patsubst -L%,-Wl$(COMMA)-rpath$(COMMA)%,$(filter -L%,$(BLAS_LIBS)))
BLAS_KIND   := $(if $(findstring openmp,$(BLAS_PC)),OpenMP,$(if $(findstring pthread,$(BLAS_LIBS)),pthreads,system))
HASH := \#
HAVE_BLAS := $(shell printf '$(HASH)include <cblas.h>\nint main(void){openblas_set_num_threads(1);return 0;}\n' | \
               $(CC) -x c - -o /dev/null $(BLAS_CFLAGS) $(BLAS_LIBS) >/dev/null 2>&1 && echo yes)
ifneq ($(HAVE_BLAS),yes)
  ifeq ($(NO_CHECKS),)
    $(error OpenBLAS (CBLAS) not found: install it with 'apt-get install libopenblas-dev pkg-config')
  endif
endif
CFLAGS += $(BLAS_CFLAGS)
LDLIBS += $(BLAS_LIBS)

# ---- zlib (checkpoint CRCs, shard compression), FFmpeg (video in and out), stb_image (PNG/JPEG) ----
HAVE_ZLIB   := $(shell printf '$(HASH)include <zlib.h>\nint main(void){return (int)crc32(0,0,0);}\n' | \
               $(CC) -x c - -o /dev/null -lz >/dev/null 2>&1 && echo yes || echo no)
HAVE_PKGCONFIG := $(shell command -v pkg-config >/dev/null 2>&1 && echo yes || echo no)
HAVE_FFMPEG := $(shell pkg-config --exists libavformat libavcodec libswscale libavutil 2>/dev/null && echo yes || echo no)
STB_DIR     := $(firstword $(dir $(wildcard /usr/include/stb/stb_image.h /usr/local/include/stb/stb_image.h)))
ifeq ($(NO_CHECKS),)
  ifneq ($(HAVE_ZLIB),yes)
    $(error zlib not found: install it with 'apt-get install zlib1g-dev pkg-config')
  endif
endif
# Without the FFmpeg libraries or stb (NO_FFMPEG=1 forces it) the build has no video or image I/O:
# src/video/video_none.c says so at run time. Training on the built-in shapes still works (GPU servers).
# What is missing, for the build line: pkg-config finds FFmpeg, so without it FFmpeg looks absent.
FFMPEG_MISSING := $(strip $(if $(filter no,$(HAVE_PKGCONFIG)),pkg-config,$(if $(filter no,$(HAVE_FFMPEG)),\
                    libavformat-dev libavcodec-dev libswscale-dev libavutil-dev)) $(if $(STB_DIR),,libstb-dev))
ifeq ($(NO_FFMPEG),1)
  FFMPEG_STATUS := no (NO_FFMPEG=1)
else ifneq ($(FFMPEG_MISSING),)
  ifeq ($(NO_FFMPEG)$(NO_CHECKS),0)
    $(error NO_FFMPEG=0, but $(if $(filter no,$(HAVE_PKGCONFIG)),pkg-config (which finds FFmpeg),FFmpeg or stb_image) is not found: apt-get install $(FFMPEG_MISSING))
  endif
  override NO_FFMPEG := 1
  FFMPEG_STATUS := no (video and image I/O disabled: $(if $(filter no,$(HAVE_PKGCONFIG)),pkg-config not found; )apt-get install $(FFMPEG_MISSING))
endif
FFMPEG_LIBS := libavformat libavcodec libswscale libavutil
ifeq ($(NO_FFMPEG),1)
  VIDEO_SRC := src/video/video_none.c src/video/frame_convert.c
  LDLIBS += -lz -lpthread
else
  VIDEO_SRC := $(filter-out src/video/video_none.c,$(wildcard src/video/*.c))
  FFMPEG_STATUS := $(shell pkg-config --modversion libavformat 2>/dev/null)
  CFLAGS += $(shell pkg-config --cflags $(FFMPEG_LIBS) 2>/dev/null) -I$(STB_DIR)
  LDLIBS += -lz $(shell pkg-config --libs $(FFMPEG_LIBS) 2>/dev/null) -lpthread
endif

# ---- MPI (optional): one run on several ranks, `mpirun -np N framechain train` (src/dist) ----
# Found by compiling against it (pkg-config's mpi-c, which Open MPI and MPICH both ship, else what
# mpicc says); NO_MPI=1 leaves it out, as does the sanitizer build (MPI's own allocations at exit are
# not ours to report). Without it train runs one rank and says how to get more.
ifneq ($(NO_MPI),1)
  MPI_CFLAGS := $(shell pkg-config --cflags mpi-c 2>/dev/null || mpicc --showme:compile 2>/dev/null)
  MPI_LIBS   := $(shell pkg-config --libs mpi-c 2>/dev/null || mpicc --showme:link 2>/dev/null)
  HAVE_MPI   := $(shell printf '$(HASH)include <mpi.h>\nint main(void){return MPI_Init(0,0);}\n' | \
                  $(CC) -x c - -o /dev/null $(MPI_CFLAGS) $(MPI_LIBS) >/dev/null 2>&1 && echo yes)
endif
ifeq ($(HAVE_MPI),yes)
  CFLAGS     += -DFC_MPI $(MPI_CFLAGS)
  LDLIBS     += $(MPI_LIBS)
  MPI_STATUS := yes ($(shell pkg-config --modversion mpi-c 2>/dev/null || echo found))
else ifeq ($(NO_MPI),1)
  MPI_STATUS := no (NO_MPI=1)
  CFLAGS     += -DFC_NO_MPI_ASKED
else
  MPI_STATUS := no (one rank: apt-get install libopenmpi-dev openmpi-bin for mpirun)
endif

# ---- CUDA ----
# An NVCC given (NVCC=..., or in the environment) that does not work stops the build; one found on
# its own that is too old leaves the build CPU-only, with a note in the build line.
NVCC_GIVEN := $(filter-out undefined,$(origin NVCC))
NVCC ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
ifeq ($(NO_CUDA),1)
  override NVCC :=
endif
CUDA_ARCH ?= 86 89 90
ifneq ($(NVCC),)
  NVCC_FOUND := $(shell p=$$(command -v '$(NVCC)' 2>/dev/null) && test -x "$$p" && echo "$$p")
  # bf16 tensor cores and sm_89/sm_90 need CUDA 11.8: an older toolkit is refused with one line.
  NVCC_RELEASE := $(if $(NVCC_FOUND),$(shell '$(NVCC_FOUND)' --version 2>/dev/null | sed -nE 's/.*release ([0-9]+)\.([0-9]+).*/\1.\2/p'))
  NVCC_OK := $(shell echo "$(NVCC_RELEASE)" | awk -F. '{ print ($$1 > 11 || ($$1 == 11 && $$2 >= 8)) ? "yes" : "no" }')
  NVCC_WRONG := $(if $(NVCC_FOUND),$(NVCC) is CUDA $(or $(NVCC_RELEASE),of unknown version ($(NVCC) --version names no release)): \
                  the CUDA backend needs CUDA 11.8 or newer (bf16 tensor cores$(COMMA) sm_89 and sm_90),$(NVCC): not found or not executable)
  ifneq ($(NVCC_OK),yes)
    ifneq ($(NVCC_GIVEN),)
      ifeq ($(NO_CHECKS),)
        $(error NVCC=$(NVCC_WRONG); make NO_CUDA=1 builds for the CPU only)
      endif
    endif
    CUDA_NOTE := ; $(NVCC_WRONG)
    override NVCC :=
  endif
endif
ifneq ($(NVCC),)
  CUDA_HOME   ?= $(patsubst %/bin/nvcc,%,$(NVCC_FOUND))
  NVCC_FLAGS  := -O3 -std=c++17 $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
                 -Xcompiler -fopenmp,-fPIC,-Wall,-Wno-format-truncation $(BLAS_CFLAGS)
  CFLAGS      += -DFC_CUDA
  CUDA_LIBS   := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt -lstdc++
  LDLIBS      += $(CUDA_LIBS)
  # NCCL (the toolkit's, or Debian's libnccl-dev): the GPU ranks' collectives (cuda/nccl.cu); without
  # it they go through host memory and MPI. Found by compiling against it; NO_NCCL=1 leaves it out.
  ifneq ($(NO_NCCL),1)
    HAVE_NCCL := $(shell printf '$(HASH)include <nccl.h>\nint main(void){int v;return (int)ncclGetVersion(&v);}\n' | \
                   $(CC) -x c - -o /dev/null -I$(CUDA_HOME)/include -L$(CUDA_HOME)/lib64 -lnccl >/dev/null 2>&1 && echo yes)
  endif
  ifeq ($(HAVE_NCCL),yes)
    NVCC_FLAGS += -DFC_NCCL
    CUDA_LIBS  += -lnccl
    LDLIBS     += -lnccl
  endif
  CUDA_STATUS := yes ($(NVCC), CUDA $(NVCC_RELEASE), sm_$(subst $() $(),/sm_,$(strip $(CUDA_ARCH))); NCCL $(or $(HAVE_NCCL),no))
else ifeq ($(NO_CUDA),1)
  CUDA_STATUS := no (CPU-only build: NO_CUDA=1)
  CFLAGS      += -DFC_NO_CUDA_ASKED
else
  CUDA_STATUS := no (CPU-only build$(CUDA_NOTE))
endif

# ---- sources: found per folder, one folder a layer (docs/architecture.md) ----
# src/<layer>/ is the library; src/*.c are main and the commands. Every include names its layer
# (#include "backend/backend.h") from src/, or from the top for the CUDA backend's C header.
LAYERS   := base formats video backend backend/cpu dist model dataset train chain report
LIB_SRC  := $(filter-out src/video/%,$(foreach d,$(LAYERS),$(wildcard src/$(d)/*.c))) $(VIDEO_SRC)
CMD_SRC  := $(wildcard src/*.c)
OBJ      := $(LIB_SRC:src/%.c=$(BUILD)/obj/%.o)
CMD_OBJ  := $(CMD_SRC:src/%.c=$(BUILD)/obj/%.o)
# The gradient tests compile the same sources in double precision.
OBJ64    := $(LIB_SRC:src/%.c=$(BUILD)/f64/%.o)
CUDA_OBJ := $(if $(NVCC),$(patsubst cuda/%.cu,$(BUILD)/cuda/%.o,$(wildcard cuda/*.cu)))
# The program opens the CUDA backend as a shared library when a command first needs it
# (src/backend/registry.c): loading the CUDA runtime and cuBLAS costs every command 0.4 s and 200 MB
# otherwise. The library takes the program's own functions (fc_die, ...): the program exports them.
CUDA_SO  := $(if $(NVCC),$(BUILD)/libframechain_cuda.so)
BIN_LDLIBS := $(filter-out -lcudart -lcublas -lcublasLt -lnccl,$(LDLIBS)) $(if $(CUDA_SO),-rdynamic -ldl)
CFLAGS   += -Isrc -I.
DEPFLAGS := -MMD -MP

# ---- the source's commit: --version, checkpoints and eval's settings name it (src/base/commit.h) ----
# In a git checkout of its own, git's commit ("+changes" where tracked files differ from it); in a tree
# made by `git archive`, the commit git wrote into src/base/commit.txt (export-subst: .gitattributes);
# else "unknown". A stamp holds it, as the flags' stamps below hold theirs: when it changes, commit.o
# alone is compiled again. (--exclude='*': the commit's hash even where a tag names it.)
COMMIT := $(or $(shell { [ -z "$$(git rev-parse --show-prefix 2>/dev/null)" ] && \
              git describe --always --dirty=+changes --exclude='*' 2>/dev/null || \
              sed -n '/^[0-9a-f][0-9a-f]*$$/p' src/base/commit.txt 2>/dev/null; } | head -1 | tr -cd 'A-Za-z0-9._+-'),unknown)
STAMP_commit := $(BUILD)/commit.txt

.PHONY: all demo eval test test-cuda test-cuda-emu bench bench-cuda bench-ops fuzz sanitize bench-prepare test-sanitize \
        clean info help
all: info $(BIN)

info:
	@echo "framechain build: commit $(COMMIT) | OpenBLAS yes ($(BLAS_KIND)) | FFmpeg $(FFMPEG_STATUS) | MPI $(MPI_STATUS) | CUDA $(CUDA_STATUS)"

help:
	@echo "make [all]         build ./framechain (make info: what it finds)"
	@echo "make test          the test suite; test-cuda, test-cuda-emu: the CUDA backend's checks; sanitize: under ASan/UBSan"
	@echo "make demo, eval    the README's demo and quality table; bench, bench-cuda, bench-ops, bench-prepare: benchmarks"
	@echo "make fuzz          libFuzzer targets (FUZZ_SECONDS); make clean: remove what the build made"
	@echo "options: NO_CUDA=1 NO_MPI=1 NO_NCCL=1 NO_FFMPEG=1 NVCC=path CUDA_ARCH='86 89 90' OPT=-O3 SAN=1 BUILD=dir BIN=path"
	@echo "         (BUILD=dir builds dir/framechain, not ./framechain, unless BIN says otherwise)"

# ---- the build options in stamps ----
# NO_MPI, NO_CUDA, NO_FFMPEG, OPT, SAN, CUDA_ARCH, NO_NCCL... change the flags, never the sources. Each
# stamp holds one compiler's flags; when they differ from the last build's (see the end of this file)
# it is written anew, newer than every object built with the old ones, so those are rebuilt.
FLAGS_c    := $(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS) $(BIN_LDLIBS) NO_FFMPEG=$(if $(filter 1,$(NO_FFMPEG)),1,0)
FLAGS_cuda := $(NVCC) $(NVCC_FLAGS) $(CUDA_LIBS)
STAMP_c    := $(BUILD)/flags-c.txt
STAMP_cuda := $(BUILD)/flags-cuda.txt
STAMP_emu  := $(BUILD)/flags-emu.txt
sq = $(subst ','\'',$(1))
$(STAMP_c) $(STAMP_cuda) $(STAMP_emu): $(BUILD)/flags-%.txt:
	@mkdir -p $(@D)
	@printf '%s\n' '$(call sq,$(FLAGS_$*))' > $@

$(STAMP_commit):
	@mkdir -p $(@D)
	@echo '$(COMMIT)' > $@
$(BUILD)/obj/base/commit.o $(BUILD)/f64/base/commit.o: $(STAMP_commit)
$(BUILD)/obj/base/commit.o $(BUILD)/f64/base/commit.o: CFLAGS += -DFC_COMMIT='"$(COMMIT)"'

$(BUILD)/obj/%.o: src/%.c $(STAMP_c)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/f64/%.o: src/%.c $(STAMP_c)
	@mkdir -p $(@D)
	$(CC) $(filter-out -DFC_CUDA,$(CFLAGS)) -DFC_DOUBLE $(DEPFLAGS) -c $< -o $@

$(BUILD)/cuda/%.o: cuda/%.cu $(STAMP_cuda)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -Isrc -I. $(DEPFLAGS) -c $< -o $@

$(BIN): $(CMD_OBJ) $(OBJ) $(CUDA_SO) $(STAMP_c)
	$(CC) $(CFLAGS) $(LDFLAGS) $(CMD_OBJ) $(OBJ) -o $@ $(BIN_LDLIBS)

ifneq ($(CUDA_SO),)
$(BUILD)/obj/backend/registry.o: CFLAGS += -DFC_CUDA_LIB='"$(abspath $(CUDA_SO))"'
# -Bsymbolic: the library's calls among its own functions stay its own (the program has weak
# stand-ins of the same names, which open the library).
$(CUDA_SO): $(CUDA_OBJ) $(STAMP_c)
	$(CC) -shared -fopenmp -Wl,-Bsymbolic -Wl,--as-needed $(LDFLAGS) $(CUDA_OBJ) -o $@ $(CUDA_LIBS) $(LDLIBS)
endif

# ---- tests: tests/<layer>/test_*.c, one program each, built by one rule ----
# A test program is $(BUILD)/test_NAME from tests/*/test_NAME.c, linked with the library. The
# gradient checks (test_grad) take the double-precision objects; test_cuda has the sources of TEST_CUDA_PARTS too.
TEST_SRC   := $(wildcard tests/*/test_*.c)
TEST_PROGS := $(patsubst %.c,$(BUILD)/%,$(notdir $(TEST_SRC)))
TEST_CUDA_PARTS := tests/cuda/cuda_step_checks.c tests/cuda/cuda_optim_checks.c tests/cuda/cuda_conv_checks.c \
                   tests/cuda/cuda_determinism_checks.c tests/cuda/cuda_fp8_checks.c \
                   tests/cuda/cuda_linear_checks.c
TEST_CFLAGS = $(CFLAGS) -Itests
TEST_LIBS_grad := $(OBJ64)
$(BUILD)/test_grad: CFLAGS := $(filter-out -DFC_CUDA,$(CFLAGS)) -DFC_DOUBLE
$(BUILD)/test_cuda: $(TEST_CUDA_PARTS)

# A recipe that fails leaves no target behind: translate.sh's output goes to its target through a
# redirect, which a failure would leave truncated but newer than its sources.
.DELETE_ON_ERROR:
.SECONDEXPANSION:
$(BUILD)/test_%: $$(wildcard tests/*/test_$$*.c) $$(or $$(TEST_LIBS_$$*),$$(OBJ) $$(CUDA_OBJ)) $(STAMP_c)
	@mkdir -p $(BUILD)/dep
	$(CC) $(TEST_CFLAGS) -MMD -MP -MF $(BUILD)/dep/test_$*.d $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS)

$(BUILD)/dump_reference: tests/model/dump_reference.c $(OBJ) $(CUDA_OBJ) $(STAMP_c)
	@mkdir -p $(BUILD)/dep
	$(CC) $(TEST_CFLAGS) $(DEPFLAGS) -MF $(BUILD)/dep/dump_reference.d $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS)

# The CUDA backend's own code on the CPU (tests/cuda/emu): test_cuda's checks without a GPU, each
# .cu file rewritten by tests/cuda/emu/translate.sh (launches, shared memory) and compiled as C++.
# It needs only the toolkit's headers, so the sanitizer build (SAN=1, no nvcc) has it too: there
# address and undefined-behaviour checks cover the kernels (a misaligned float4 access, a read past a
# buffer).
CUDA_INC ?= $(patsubst %/cuda_runtime.h,%,$(firstword $(wildcard $(if $(CUDA_HOME),$(CUDA_HOME)/include/cuda_runtime.h) \
              /usr/local/cuda/include/cuda_runtime.h /usr/include/cuda_runtime.h)))
ifneq ($(CUDA_INC),)
EMU_CXXFLAGS := $(if $(filter 1,$(SAN)),-O1 $(SAN_FLAGS),-O2) -g -std=c++17 -ffp-contract=off -fno-strict-aliasing \
                -DFC_EMU -Icuda -Isrc -I. -I$(CUDA_INC) $(BLAS_CFLAGS) -Wall -Wno-unused-parameter -Wno-unknown-pragmas \
                -Wno-format-truncation
EMU_CPP := $(patsubst cuda/%.cu,$(BUILD)/emu/%.cpp,$(wildcard cuda/*.cu))
EMU_OBJ := $(EMU_CPP:.cpp=.o) $(BUILD)/emu/lib_cuda_emu.o $(BUILD)/emu/lib_cuda_emu_runtime.o
FLAGS_emu := $(CXX) $(EMU_CXXFLAGS)
TEST_EMU := $(BUILD)/test_cuda_emu $(BUILD)/framechain_emu

$(BUILD)/emu/%.cpp: cuda/%.cu tests/cuda/emu/translate.sh
	@mkdir -p $(@D)
	@tests/cuda/emu/translate.sh $< > $@

$(BUILD)/emu/%.o: $(BUILD)/emu/%.cpp tests/cuda/emu/cuda_emu.h $(STAMP_emu)
	$(CXX) $(EMU_CXXFLAGS) $(DEPFLAGS) -include tests/cuda/emu/cuda_emu.h -c $< -o $@

$(BUILD)/emu/lib_%.o: tests/cuda/emu/%.cpp tests/cuda/emu/cuda_emu.h $(STAMP_emu)
	@mkdir -p $(@D)
	$(CXX) $(EMU_CXXFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/test_cuda_emu: tests/cuda/test_cuda.c $(TEST_CUDA_PARTS) $(OBJ) $(EMU_OBJ) $(STAMP_c)
	@mkdir -p $(BUILD)/dep
	$(CC) $(TEST_CFLAGS) $(DEPFLAGS) -MF $(BUILD)/dep/test_cuda_emu.d $(LDFLAGS) $(filter %.c %.o,$^) -o $@ \
	    $(filter-out -lcudart -lcublas -lcublasLt -lnccl,$(LDLIBS)) -lstdc++

# The whole program on the emulated GPU (tests/cuda/test_cuda_emu_cli.sh).
$(BUILD)/framechain_emu: $(CMD_OBJ) $(OBJ) $(EMU_OBJ) $(STAMP_c)
	$(CC) $(CFLAGS) $(LDFLAGS) $(filter %.o,$^) -o $@ $(filter-out -lcudart -lcublas -lcublasLt -lnccl,$(LDLIBS)) -lstdc++
endif

# The intermediates (the emulation's rewritten sources, the double-precision objects only test_grad
# names) are kept: make's removal of them would print after the test count. Only those: a secondary
# file that is missing is not remade, and the CUDA backend's library, which nothing links, would stay
# missing.
.SECONDARY: $(OBJ64) $(EMU_CPP)

# Where a step's time goes, op by op (tools/bench_ops.c); a benchmark, not a test.
$(BUILD)/bench_ops: tools/bench_ops.c $(OBJ) $(CUDA_OBJ) $(STAMP_c)
	@mkdir -p $(BUILD)/dep
	$(CC) $(CFLAGS) $(DEPFLAGS) -MF $(BUILD)/dep/bench_ops.d $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS)

# the moving shapes' truth for tools/strip.sh
$(BUILD)/draw_shapes: tools/draw_shapes.c $(OBJ) $(CUDA_OBJ) $(STAMP_c)
	@mkdir -p $(BUILD)/dep
	$(CC) $(TEST_CFLAGS) $(DEPFLAGS) -MF $(BUILD)/dep/draw_shapes.d $(LDFLAGS) $(filter %.c %.o,$^) -o $@ $(LDLIBS)

bench-ops: info $(BUILD)/bench_ops
	$(BUILD)/bench_ops $(BENCH_OPS_ARGS)

$(BUILD)/bench_gemm: tools/bench_gemm.c $(STAMP_c)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(LDFLAGS) $< -o $@ $(LDLIBS)

# framechain against PyTorch, side by side in one run (BENCHMARKS.md): on the CPU, and on a GPU.
bench: info $(BIN) $(BUILD)/bench_gemm
	@BUILD='$(BUILD)' FC='$(abspath $(BIN))' PYTHON='$(PYTHON)' tools/bench.sh

bench-cuda: info $(BIN)
	@FC='$(abspath $(BIN))' tools/bench_cuda.sh

# The power-loss test's LD_PRELOAD library (tests/train/test_powerloss.sh): it records what train
# writes. Plain flags, never the sanitizers': it is loaded into framechain, not linked with it.
$(BUILD)/powerloss_shim.so: tests/train/powerloss_shim.c
	@mkdir -p $(@D)
	$(CC) -O2 -g -Wall -Wextra -std=gnu11 -fPIC -shared $< -o $@ -ldl -lpthread

TEST_BINS := $(BIN) $(TEST_PROGS) $(BUILD)/dump_reference $(BUILD)/draw_shapes $(BUILD)/powerloss_shim.so $(TEST_EMU) \
             $(BUILD)/bench_ops

test: info $(TEST_BINS)
	@BUILD='$(BUILD)' FRAMECHAIN='$(abspath $(BIN))' PYTHON='$(PYTHON)' tests/run_tests.sh

# The CUDA backend against the CPU backend, op by op and on whole training steps; says loudly
# that it skipped when there is no GPU. make test runs it too.
test-cuda: info $(BIN) $(BUILD)/test_cuda
	@BUILD='$(BUILD)' FRAMECHAIN='$(abspath $(BIN))' tests/run_tests.sh --only cuda

# The same checks on the CUDA emulation (tests/cuda/emu), on any machine with the CUDA toolkit.
test-cuda-emu: info $(TEST_EMU)
	@BUILD='$(BUILD)' FRAMECHAIN='$(abspath $(BIN))' tests/run_tests.sh --only cuda_emulated,cuda_emulated_cli

# The README's main job: sample data, three small models trained, out/demo.mp4 and out/demo.gif.
demo: info $(BIN)
	FC='$(abspath $(BIN))' tools/demo.sh

# The chain on scenes it never saw (README, "Quality"): the demo's three models trained on two
# videos, scored on another, on synthetic pans and on moving shapes.
eval: info $(BIN)
	FC='$(abspath $(BIN))' tools/eval_unseen.sh out/eval-unseen $(EVAL_KEYS)

# Benchmarks (not tests: they assert nothing). prepare's frames/s beside the ffmpeg command line.
bench-prepare: $(BIN)
	FC='$(abspath $(BIN))' tools/bench_prepare.sh

# The sanitizer build: address and undefined behaviour, CPU only, the whole suite.
sanitize test-sanitize:
	$(MAKE) --no-print-directory BUILD=build-san SAN=1 OPT=-O1 test

# ---- fuzzing (clang's libFuzzer with address and undefined-behaviour sanitizers) ----
# make fuzz FUZZ_SECONDS=300 runs each target for that long from the corpus in tests/fuzz/.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_FLAGS   := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc
FUZZ_SRC     := $(wildcard src/base/*.c src/formats/*.c)
# (one command compiles them all: every header they may include is a prerequisite, not a .d file's few)
build-fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_SRC) $(wildcard src/*/*.h tests/*.h)
	@mkdir -p build-fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) $(BLAS_CFLAGS) $< $(FUZZ_SRC) -o $@ $(BLAS_LIBS) -lz -lpthread -lm

fuzz: build-fuzz/fuzz_safetensors build-fuzz/fuzz_config build-fuzz/fuzz_shard
	@for t in safetensors config shard; do \
	    mkdir -p build-fuzz/corpus-$$t; \
	    echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	    build-fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=build-fuzz/ \
	        build-fuzz/corpus-$$t tests/fuzz/$$t > build-fuzz/fuzz_$$t.log 2>&1; \
	    status=$$?; \
	    grep -E "stat::number_of_executed_units|stat::average_exec_per_sec|ERROR|SUMMARY" build-fuzz/fuzz_$$t.log; \
	    if [ $$status -ne 0 ]; then echo "fuzz_$$t failed: build-fuzz/fuzz_$$t.log"; exit 1; fi; \
	done

# What the build made: this BUILD and BIN, the default ones, the sanitizer's and the fuzzers' folders,
# and tools/gpu_bundle.sh's (a make BUILD=build-gpu). build-carry is not the build's: the bundles
# copied there by hand for a GPU machine (tools/gpu_run.sh).
clean:
	rm -rf '$(BUILD)' '$(BIN)' build build-san build-fuzz build-gpu build-gpu-nompi framechain

# A stamp whose flags differ from this build's is out of date: its rule above writes it anew (make -n
# only says so).
ifeq ($(NO_CHECKS),)
$(foreach s,c cuda emu,$(if $(shell printf '%s\n' '$(call sq,$(FLAGS_$(s)))' | cmp -s - '$(BUILD)/flags-$(s).txt' || \
                                      echo differs),$(eval $(BUILD)/flags-$(s).txt: FORCE)))
$(if $(shell echo '$(COMMIT)' | cmp -s - '$(STAMP_commit)' || echo differs),$(eval $(STAMP_commit): FORCE))
endif
FORCE:

# Each object depends on the headers it includes (-MMD -MP), not on every header.
-include $(shell find '$(BUILD)' -name '*.d' 2>/dev/null)
