// linear.cu: the linear layer of the CUDA backend. y = x @ w^T + b forward, and the three
// accumulated gradients backward: dx and dw through cuBLAS SGEMM (fp32, no TF32, no atomics, so
// the same bytes on every run on one GPU), db by a deterministic two-pass column sum in double.
//
// cuBLAS is column-major. A row-major (R, C) matrix with leading dimension C is, to cuBLAS, the
// column-major (C, R) matrix: its transpose. Every call below is written in those terms.
#include "cuda_common.cuh"

static_assert(sizeof(real) == sizeof(float), "the CUDA backend is built with real = float");

#define LIN_THREADS 256
#define LIN_MAX_BLOCKS 4096  // grid-stride loops beyond this many blocks

// The column sum of db: blocks of COLSUM_COLS x COLSUM_LANES threads, each block summing one
// chunk of rows of COLSUM_COLS consecutive columns.
#define COLSUM_COLS 32   // threadIdx.x: one column each (a warp reads 128 contiguous bytes of a row)
#define COLSUM_LANES 8   // threadIdx.y: row lanes, reduced by a fixed tree in shared memory
#define COLSUM_ROWS 256  // rows per chunk (doubled until the chunks fit in gridDim.y)

static unsigned lin_grid(size_t n) {
    unsigned b = fc_cdiv(n, LIN_THREADS);
    return b < LIN_MAX_BLOCKS ? b : LIN_MAX_BLOCKS;
}

// y (M, N) = b (N) broadcast over the rows, before the GEMM adds x @ w^T with beta = 1.
// One thread per element of y (grid-stride); consecutive threads write consecutive columns.
__global__ void linear_bias_broadcast_kernel(float *__restrict__ y, const float *__restrict__ b, size_t M,
                                             size_t N) {
    size_t total = M * N;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        y[i] = b[i % N];
}

// Column sums of dy (M, N), pass 1. Block (x, chunk): columns x*32 .. x*32+31, rows
// [chunk*rows_per_chunk, +rows_per_chunk). Thread (tx, ty) sums, in double and in increasing row
// order, rows chunk_start + ty, + 8, + 16, ... of column x*32 + tx; the 8 lanes are then added by a
// fixed tree (lane 0 += lane 4, ..., lane 0 += lane 1). The chunk's sum goes to partial[chunk][n]
// when there are several chunks, or straight into db[n] (+=) when there is one.
__global__ void linear_colsum_partial_kernel(double *__restrict__ partial, float *__restrict__ db,
                                             const float *__restrict__ dy, int M, int N, int rows_per_chunk) {
    __shared__ double acc[COLSUM_LANES][COLSUM_COLS];
    int tx = threadIdx.x, ty = threadIdx.y;
    int n = blockIdx.x * COLSUM_COLS + tx;
    long m0 = (long)blockIdx.y * rows_per_chunk;
    long m1 = m0 + rows_per_chunk < M ? m0 + rows_per_chunk : M;
    double sum = 0;
    if (n < N)
        for (long m = m0 + ty; m < m1; m += COLSUM_LANES) sum += (double)dy[m * N + n];
    acc[ty][tx] = sum;
    __syncthreads();
    for (int half = COLSUM_LANES / 2; half > 0; half /= 2) {
        if (ty < half) acc[ty][tx] += acc[ty + half][tx];
        __syncthreads();
    }
    if (ty == 0 && n < N) {
        if (gridDim.y == 1)
            db[n] += (float)acc[0][tx];
        else
            partial[(size_t)blockIdx.y * N + n] = acc[0][tx];
    }
}

// Column sums, pass 2: one thread per column n adds its chunks' partial sums in chunk order.
__global__ void linear_colsum_finish_kernel(float *__restrict__ db, const double *__restrict__ partial, int N,
                                            int nchunks) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    double sum = 0;
    for (int c = 0; c < nchunks; c++) sum += partial[(size_t)c * N + n];
    db[n] += (float)sum;
}

// db (N) += column sums of dy (M, N). The partition into chunks depends only on M, so the result
// does not depend on the GPU.
static void linear_bias_grad(real *db, const real *dy, int M, int N) {
    long rows_per_chunk = COLSUM_ROWS;
    while ((M + rows_per_chunk - 1) / rows_per_chunk > 65535) rows_per_chunk *= 2;
    int nchunks = (int)((M + rows_per_chunk - 1) / rows_per_chunk);
    double *partial = NULL;
    if (nchunks > 1) partial = (double *)fc_cuda_scratch(SCRATCH_LINEAR, sizeof(double) * (size_t)nchunks * N);
    dim3 block(COLSUM_COLS, COLSUM_LANES), grid(fc_cdiv(N, COLSUM_COLS), nchunks);
    linear_colsum_partial_kernel<<<grid, block>>>(partial, db, dy, M, N, (int)rows_per_chunk);
    kernelCheck();
    if (nchunks > 1) {
        linear_colsum_finish_kernel<<<fc_cdiv(N, LIN_THREADS), LIN_THREADS>>>(db, partial, N, nchunks);
        kernelCheck();
    }
}

// cuBLAS takes alpha and beta from host memory; set it on every call, as the handle is shared.
static cublasHandle_t linear_handle(void) {
    cublasHandle_t h = fc_cublas();
    cublasCheck(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    return h;
}

static void cuda_linear_fwd(real *y, const real *x, const real *w, const real *b, int M, int K, int N) {
    if (M <= 0 || N <= 0) return;
    if (b) {
        linear_bias_broadcast_kernel<<<lin_grid((size_t)M * N), LIN_THREADS>>>(y, b, (size_t)M, (size_t)N);
        kernelCheck();
    }
    if (K <= 0) {  // an empty product: y is the bias, or zero
        if (!b) cudaCheck(cudaMemset(y, 0, sizeof(real) * (size_t)M * N));
        return;
    }
    const float one = 1.0f, zero = 0.0f;
    // y^T (N, M) = w (N, K) @ x^T (K, M): w is column-major (K, N), so op T; x is column-major (K, M), op N.
    cublasCheck(cublasSgemm(linear_handle(), CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, K, x, K, b ? &one : &zero,
                            y, N));
}

static void cuda_linear_bwd(real *dx, real *dw, real *db, const real *dy, const real *x, const real *w, int M,
                            int K, int N) {
    if (M <= 0 || N <= 0) return;  // dy is empty: nothing to add
    const float one = 1.0f;
    if (dx && K > 0)
        // dx^T (K, M) += w^T (K, N) @ dy^T (N, M): w is column-major (K, N) and dy column-major (N, M), both op N.
        cublasCheck(cublasSgemm(linear_handle(), CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, &one, w, K, dy, N, &one, dx, K));
    if (dw && K > 0)
        // dw^T (K, N) += x^T (K, M) @ dy (M, N): x is column-major (K, M), op N; dy is column-major (N, M), op T.
        cublasCheck(cublasSgemm(linear_handle(), CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, &one, x, K, dy, N, &one, dw, K));
    if (db) linear_bias_grad(db, dy, M, N);
}

void cuda_register_linear(Backend *be) {
    be->linear_fwd = cuda_linear_fwd;
    be->linear_bwd = cuda_linear_bwd;
}
