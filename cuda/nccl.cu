// nccl.cu: NCCL for the ranks of a run on GPUs (docs/distributed.md): the sum of the gradients and
// ZeRO-1's all-gather of the weights on device memory, where the ranks otherwise go through host
// memory and MPI. MPI still starts the ranks: it carries NCCL's unique id from rank 0 (`share`).
// Built where the toolkit has nccl.h and libnccl (the Makefile's FC_NCCL); without it, and on the
// CPU emulation, backend_cuda_nccl_start says why and the ranks use MPI.
#include "cuda_common.cuh"
#include "cuda/backend_cuda.h"

#if defined(FC_NCCL) && !defined(FC_EMU)
#include <nccl.h>

static ncclComm_t g_comm;
static cudaStream_t g_stream;  // NCCL's own, non-blocking: it runs beside the backend's default stream
static cudaEvent_t g_made, g_summed;  // ordering between the two streams (the sums started in the backward)
static int g_size;

#define ncclCheck(call)                                                                                      \
    do {                                                                                                     \
        ncclResult_t r_ = (call);                                                                            \
        if (r_ != ncclSuccess)                                                                               \
            fc_die("%s:%d: %s: %s (hint: NCCL_DEBUG=INFO says more)", __FILE__, __LINE__, #call,             \
                   ncclGetErrorString(r_));                                                                  \
    } while (0)

extern "C" int backend_cuda_nccl_built(void) { return 1; }

extern "C" int backend_cuda_nccl_start(int rank, int size, void (*share)(void *bytes, size_t n), char *err,
                                       size_t errlen) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    int ok = r == ncclSuccess;
    share(&ok, sizeof ok);  // every rank learns whether rank 0 has an id, so none waits alone
    if (!ok) {
        snprintf(err, errlen, "NCCL: no unique id on rank 0 (%s)", r == ncclSuccess ? "" : ncclGetErrorString(r));
        return -1;
    }
    share(&id, sizeof id);
    r = ncclCommInitRank(&g_comm, size, id, rank);
    if (r != ncclSuccess) {  // a rank that cannot join ends the job: the others would wait for it
        fc_die("rank %d: ncclCommInitRank: %s (hint: ranks that share a GPU need --set collectives=mpi; "
               "NCCL_DEBUG=INFO says more)", rank, ncclGetErrorString(r));
    }
    cudaCheck(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&g_made, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&g_summed, cudaEventDisableTiming));
    g_size = size;
    int version = 0;
    ncclGetVersion(&version);
    snprintf(err, errlen, "NCCL %d.%d.%d", version / 10000, version / 100 % 100, version % 100);
    return 0;
}

extern "C" void backend_cuda_nccl_sum(float *dev, size_t n) {
    cudaCheck(cudaDeviceSynchronize());  // the backward's kernels have written every gradient
    ncclCheck(ncclAllReduce(dev, dev, n, ncclFloat, ncclSum, g_comm, g_stream));
    cudaCheck(cudaStreamSynchronize(g_stream));
}

// A part of the gradients, summed on NCCL's stream once the kernels queued so far on the default
// stream (the backward that made them) are done, while the default stream goes on with the
// backward of the blocks before it: the host does not wait.
extern "C" void backend_cuda_nccl_sum_start(float *dev, size_t n) {
    cudaCheck(cudaEventRecord(g_made, 0));
    cudaCheck(cudaStreamWaitEvent(g_stream, g_made, 0));
    ncclCheck(ncclAllReduce(dev, dev, n, ncclFloat, ncclSum, g_comm, g_stream));
}

// What the default stream queues from now on (the optimizer step) waits for every started sum.
extern "C" void backend_cuda_nccl_sum_finish(void) {
    cudaCheck(cudaEventRecord(g_summed, g_stream));
    cudaCheck(cudaStreamWaitEvent(0, g_summed, 0));
}

extern "C" void backend_cuda_nccl_gather(float *dev, const size_t *start) {
    cudaCheck(cudaDeviceSynchronize());
    ncclCheck(ncclGroupStart());  // rank r's part from rank r to all: parts of unequal size
    for (int r = 0; r < g_size; r++)
        ncclCheck(ncclBroadcast(dev + start[r], dev + start[r], start[r + 1] - start[r], ncclFloat, r, g_comm, g_stream));
    ncclCheck(ncclGroupEnd());
    cudaCheck(cudaStreamSynchronize(g_stream));
    fc_cuda_weights_touched(dev, sizeof(float) * start[g_size]);  // the weights' bf16 mirror is stale
}

#else

extern "C" int backend_cuda_nccl_start(int rank, int size, void (*share)(void *bytes, size_t n), char *err,
                                       size_t errlen) {
    (void)rank, (void)size, (void)share;
#ifdef FC_EMU
    snprintf(err, errlen, "the CUDA emulation has no NCCL");
#else
    snprintf(err, errlen, "this build has no NCCL (the CUDA toolkit's nccl.h and libnccl were not found)");
#endif
    return -1;
}
extern "C" int backend_cuda_nccl_built(void) { return 0; }
extern "C" void backend_cuda_nccl_sum(float *dev, size_t n) { (void)dev, (void)n; }
extern "C" void backend_cuda_nccl_sum_start(float *dev, size_t n) { (void)dev, (void)n; }
extern "C" void backend_cuda_nccl_sum_finish(void) {}
extern "C" void backend_cuda_nccl_gather(float *dev, const size_t *start) { (void)dev, (void)start; }

#endif
