// cuda_emu.cpp: the scheduler of the CUDA emulation (cuda_emu.h says what it emulates): the threads
// of one block as fibers, block and warp barriers, and the warp-collective ops computed from the
// lanes' operands. The runtime and cuBLAS calls are in cuda_emu_runtime.cpp.
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cuda_emu.h"

// ----------------------------------------------------------------------------
// fibers: a stack and a saved stack pointer each; the switch saves the callee-saved registers

#define STACK_BYTES (256 << 10)
#define MAX_BLOCK_THREADS 1024

#if defined(__x86_64__) && !defined(FC_EMU_UCONTEXT)
// fc_emu_switch(save, to): pushes the callee-saved registers and the SSE/x87 control words, stores
// the stack pointer in *save, loads `to` and pops the same from there.
extern "C" void fc_emu_switch(void **save, void *to);
asm(R"(
    .text
    .globl fc_emu_switch
    .type fc_emu_switch, @function
fc_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size fc_emu_switch, .-fc_emu_switch
)");
typedef void *FiberContext;
#else
#include <ucontext.h>
typedef ucontext_t FiberContext;
#endif

enum FiberState { READY, WAIT_BLOCK, WAIT_WARP, DONE };
enum WarpOp { OP_SHFL, OP_MMA, OP_LDMATRIX };

struct Fiber {
    FiberContext ctx;
    char *stack;
    FiberState state;
    FcEmuCoords coords;
    // a warp op: kind, operands, results
    WarpOp op;
    uint64_t bits, bits_out;
    int lane_mask;
    uint32_t a[4], b[2];
    float c[4], d[4];
    const void *addr;
    int num;
    bool trans;
    uint32_t r[4];
    // cp.async copies not yet completed, each with its group (the count of commits before it)
    struct Copy {
        void *dst;
        const void *src;
        int bytes, group;
        bool valid;
    } pending[64];
    int npending, commits;
};

static Fiber g_fiber[MAX_BLOCK_THREADS];
static Fiber *g_cur;
static FiberContext g_scheduler;
static const std::function<void()> *g_body;
static unsigned char *g_smem;
static const char *g_kernel_name;

// Fiber f (running) hands control back to the scheduler; it goes on from here when resumed.
static void to_scheduler(Fiber *f) {
#if defined(__x86_64__) && !defined(FC_EMU_UCONTEXT)
    fc_emu_switch(&f->ctx, g_scheduler);
#else
    swapcontext(&f->ctx, &g_scheduler);
#endif
}

static void fiber_loop(void) {
    for (;;) {  // one kernel body per block this fiber serves; parked between them
        (*g_body)();
        g_cur->state = DONE;
        to_scheduler(g_cur);
    }
}

static void fiber_create(Fiber *f) {
    void *mem = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) fc_die("CUDA emulation: cannot map a fiber stack");
    f->stack = (char *)mem;
#if defined(__x86_64__) && !defined(FC_EMU_UCONTEXT)
    // The frame fc_emu_switch pops: control words, r15 .. rbp, the return address (fiber_loop), and
    // a zero return address for fiber_loop itself, so that it starts with the ABI's alignment.
    uint64_t *top = (uint64_t *)(f->stack + STACK_BYTES);
    uint64_t *sp = top - 9;
    sp[0] = 0x1F80u | (uint64_t)0x037F << 32;  // MXCSR default, x87 control word default
    for (int i = 1; i <= 6; i++) sp[i] = 0;
    sp[7] = (uint64_t)(uintptr_t)&fiber_loop;
    sp[8] = 0;
    f->ctx = sp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = STACK_BYTES;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, fiber_loop, 0);
#endif
}

static void resume(Fiber *f) {
    g_cur = f;
#if defined(__x86_64__) && !defined(FC_EMU_UCONTEXT)
    fc_emu_switch(&g_scheduler, f->ctx);
#else
    swapcontext(&g_scheduler, &f->ctx);
#endif
    g_cur = NULL;
}

// The running fiber waits (state WAIT_BLOCK or WAIT_WARP) until the scheduler releases it.
static void wait_as(FiberState state) {
    Fiber *f = g_cur;
    if (!f) fc_die("CUDA emulation: a device function was called outside a kernel");
    f->state = state;
    to_scheduler(f);
}

const FcEmuCoords *fc_emu_coords(void) {
    if (!g_cur) fc_die("CUDA emulation: threadIdx read outside a kernel");
    return &g_cur->coords;
}
unsigned char *fc_emu_dynamic_smem(void) { return g_smem; }

// The blocks run so far (fc_emu_run_grid counts them), and the block that last filled each static
// shared variable: a variable is filled once a block, by the first of its threads to declare it.
static uint64_t g_block_serial;
enum { MAX_SHARED_VARS = 256 };
static struct {
    void *var;
    uint64_t block;
} g_shared[MAX_SHARED_VARS];

void fc_emu_shared(void *var, size_t bytes) {
    if (!g_cur) fc_die("CUDA emulation: a __shared__ variable declared outside a kernel");
    int i = 0;
    while (i < MAX_SHARED_VARS && g_shared[i].var && g_shared[i].var != var) i++;
    if (i == MAX_SHARED_VARS) fc_die("CUDA emulation: more than %d static __shared__ variables", MAX_SHARED_VARS);
    if (g_shared[i].var == var && g_shared[i].block == g_block_serial) return;
    g_shared[i].var = var, g_shared[i].block = g_block_serial;
    memset(var, 0xff, bytes);  // NaN until written
}

// ----------------------------------------------------------------------------
// the warp-collective ops

void __syncthreads(void) { wait_as(WAIT_BLOCK); }

uint64_t fc_emu_shfl_xor(uint64_t bits, int lane_mask) {
    g_cur->op = OP_SHFL, g_cur->bits = bits, g_cur->lane_mask = lane_mask;
    wait_as(WAIT_WARP);
    return g_cur->bits_out;
}

void fc_emu_mma16816_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    Fiber *f = g_cur;
    f->op = OP_MMA;
    memcpy(f->a, a, sizeof f->a), memcpy(f->c, d, sizeof f->c);
    f->b[0] = b0, f->b[1] = b1;
    wait_as(WAIT_WARP);
    memcpy(d, g_cur->d, sizeof g_cur->d);
}

void fc_emu_ldmatrix(uint32_t *r, int num, const void *row_address, bool trans) {
    if (num != 1 && num != 2 && num != 4) fc_die("CUDA emulation: ldmatrix of %d matrices", num);
    Fiber *f = g_cur;
    f->op = OP_LDMATRIX, f->addr = row_address, f->num = num, f->trans = trans;
    wait_as(WAIT_WARP);
    memcpy(r, g_cur->r, sizeof(uint32_t) * num);
}

void fc_emu_cp_async(void *smem, const void *gmem, int bytes, bool valid) {
    Fiber *f = g_cur;
    if (!f) fc_die("CUDA emulation: cp.async outside a kernel");
    if (bytes != 4 && bytes != 8 && bytes != 16) fc_die("CUDA emulation: %s: cp.async of %d bytes", g_kernel_name, bytes);
    if ((uintptr_t)smem % bytes || (valid && (uintptr_t)gmem % bytes))
        fc_die("CUDA emulation: %s: cp.async of %d bytes between %p and %p: not aligned", g_kernel_name, bytes, smem,
               gmem);
    if (f->npending == (int)(sizeof f->pending / sizeof f->pending[0]))
        fc_die("CUDA emulation: %s: more than %d cp.async copies in flight in one thread", g_kernel_name, f->npending);
    f->pending[f->npending++] = Fiber::Copy{smem, gmem, bytes, f->commits, valid};
    memset(smem, 0xff, bytes);  // undefined (NaN) from now until the wait: a reader still on it sees it
}

void fc_emu_cp_async_commit(void) { g_cur->commits++; }

void fc_emu_cp_async_wait(int n) {
    Fiber *f = g_cur;
    int keep = 0;
    for (int i = 0; i < f->npending; i++) {
        Fiber::Copy c = f->pending[i];
        if (c.group < f->commits - n) {
            if (c.valid) memcpy(c.dst, c.src, c.bytes);
            else memset(c.dst, 0, c.bytes);
        } else {
            f->pending[keep++] = c;
        }
    }
    f->npending = keep;
}

static float bf16_lo(uint32_t v) {
    uint32_t bits = (v & 0xffffu) << 16;
    float x;
    memcpy(&x, &bits, 4);
    return x;
}
static float bf16_hi(uint32_t v) { return bf16_lo(v >> 16); }

// Fragments (PTX ISA, mma.m16n8k16 with .bf16, g = lane / 4, t = lane % 4; the lower half of a
// 32-bit register holds the element of the lower index): A rows g, g+8 at columns 2t, 2t+1 (a0, a1)
// and 2t+8, 2t+9 (a2, a3); B k rows 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of column g; C and D rows g
// (c0, c1) and g+8 (c2, c3) at columns 2t, 2t+1.
static void warp_mma(Fiber *lanes) {
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const Fiber *f = &lanes[l];
        int g = l / 4, t = l % 4;
        for (int half = 0; half < 2; half++) {  // columns 2t.. and 2t+8..
            int col = 2 * t + 8 * half;
            A[g][col] = bf16_lo(f->a[2 * half]), A[g][col + 1] = bf16_hi(f->a[2 * half]);
            A[g + 8][col] = bf16_lo(f->a[2 * half + 1]), A[g + 8][col + 1] = bf16_hi(f->a[2 * half + 1]);
            B[col][g] = bf16_lo(f->b[half]), B[col + 1][g] = bf16_hi(f->b[half]);
        }
        C[g][2 * t] = f->c[0], C[g][2 * t + 1] = f->c[1], C[g + 8][2 * t] = f->c[2], C[g + 8][2 * t + 1] = f->c[3];
    }
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        for (int e = 0; e < 4; e++) {
            int row = g + 8 * (e / 2), col = 2 * t + (e & 1);
            double sum = C[row][col];  // products of bf16 values are exact; the sum is rounded once
            for (int k = 0; k < 16; k++) sum += (double)A[row][k] * B[k][col];
            lanes[l].d[e] = (float)sum;
        }
    }
}

// ldmatrix: matrix i's rows at the addresses of lanes 8i .. 8i+7, eight 16-bit elements each. Without
// .trans lane l receives row l/4, elements 2(l%4) and 2(l%4)+1; with .trans the transpose: column
// l/4, rows 2(l%4) and 2(l%4)+1.
static void warp_ldmatrix(Fiber *lanes) {
    int num = lanes[0].num;
    bool trans = lanes[0].trans;
    uint16_t m[4][8][8];
    for (int i = 0; i < num; i++)
        for (int row = 0; row < 8; row++) {
            const Fiber *f = &lanes[8 * i + row];
            if (f->num != num || f->trans != trans) fc_die("CUDA emulation: %s: lanes disagree on ldmatrix's shape", g_kernel_name);
            if ((uintptr_t)f->addr % 16)
                fc_die("CUDA emulation: %s: ldmatrix row address %p is not 16-byte aligned", g_kernel_name, f->addr);
            memcpy(m[i][row], f->addr, 16);
        }
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < num; i++) {
            int a = l / 4, b = 2 * (l % 4);
            uint16_t lo = trans ? m[i][b][a] : m[i][a][b], hi = trans ? m[i][b + 1][a] : m[i][a][b + 1];
            lanes[l].r[i] = lo | (uint32_t)hi << 16;
        }
}

// Runs the op the lanes of one warp wait at. mma and ldmatrix need all 32 lanes.
static void warp_execute(Fiber *lanes, int nlanes) {
    WarpOp op = OP_SHFL;
    for (int l = 0; l < nlanes; l++)
        if (lanes[l].state == WAIT_WARP) op = lanes[l].op;
    for (int l = 0; l < nlanes; l++)
        if (lanes[l].state == WAIT_WARP && lanes[l].op != op)
            fc_die("CUDA emulation: %s: the lanes of a warp wait at different warp operations", g_kernel_name);
    if (op == OP_SHFL) {
        for (int l = 0; l < nlanes; l++) {
            if (lanes[l].state != WAIT_WARP) continue;
            int src = l ^ lanes[l].lane_mask;
            bool live = src < nlanes && lanes[src].state == WAIT_WARP;
            lanes[l].bits_out = live ? lanes[src].bits : lanes[l].bits;
        }
        return;
    }
    if (nlanes != 32) fc_die("CUDA emulation: %s: mma/ldmatrix in a warp of %d threads", g_kernel_name, nlanes);
    for (int l = 0; l < 32; l++)
        if (lanes[l].state != WAIT_WARP)
            fc_die("CUDA emulation: %s: mma/ldmatrix with lane %d of the warp not taking part", g_kernel_name, l);
    if (op == OP_MMA) warp_mma(lanes);
    else warp_ldmatrix(lanes);
}

// ----------------------------------------------------------------------------
// the scheduler: one block at a time, its threads until all are done

static const char *state_name(FiberState s) {
    return s == READY ? "ready" : s == WAIT_BLOCK ? "__syncthreads" : s == WAIT_WARP ? "a warp op" : "done";
}

// Runs warp w's lanes as far as they go alone: resume the ready ones, and while all its live lanes
// wait at a warp op, compute it and go on. Returns whether any lane moved.
static bool run_warp_ahead(int w, int nthreads) {
    Fiber *lanes = &g_fiber[w * 32];
    int nlanes = std::min(32, nthreads - w * 32);
    bool moved = false;
    for (;;) {
        for (int l = 0; l < nlanes; l++)
            if (lanes[l].state == READY) resume(&lanes[l]), moved = true;
        int waiting = 0, live = 0;
        for (int l = 0; l < nlanes; l++) live += lanes[l].state != DONE, waiting += lanes[l].state == WAIT_WARP;
        if (waiting == 0 || waiting != live) return moved;
        warp_execute(lanes, nlanes);
        for (int l = 0; l < nlanes; l++)
            if (lanes[l].state == WAIT_WARP) lanes[l].state = READY;
    }
}

// One warp at a time runs until it reaches __syncthreads or the end (forward order in even blocks,
// backward in odd ones): the warps of a block drift as far apart as the barriers allow, so a warp
// that refills or reads shared memory another warp is still using, without a barrier between, shows.
static void run_block(int nthreads, bool backward) {
    int nwarps = (nthreads + 31) / 32;
    for (;;) {
        bool moved = false;
        for (int k = 0; k < nwarps; k++) moved |= run_warp_ahead(backward ? nwarps - 1 - k : k, nthreads);
        int done = 0, at_block = 0;
        for (int i = 0; i < nthreads; i++) done += g_fiber[i].state == DONE, at_block += g_fiber[i].state == WAIT_BLOCK;
        if (done == nthreads) return;
        if (done + at_block == nthreads) {  // every live thread at __syncthreads
            for (int i = 0; i < nthreads; i++)
                if (g_fiber[i].state == WAIT_BLOCK) g_fiber[i].state = READY;
            continue;
        }
        if (!moved) {
            char states[256] = "";
            for (int w = 0, len = 0; w < nwarps && len < 200; w++)
                len += snprintf(states + len, sizeof states - len, " warp %d lane 0: %s;", w,
                                state_name(g_fiber[w * 32].state));
            fc_die("CUDA emulation: %s deadlocks in block (%u,%u,%u):%s", g_kernel_name, g_fiber[0].coords.block.x,
                   g_fiber[0].coords.block.y, g_fiber[0].coords.block.z, states);
        }
    }
}

// The dynamic shared memory a kernel may use: 48 KiB, or what cudaFuncSetAttribute allowed.
#define MAX_OPT_IN 64
static struct { const void *kernel; int bytes; } g_opt_in[MAX_OPT_IN];

void fc_emu_allow_smem(const void *kernel, int bytes) {
    for (int i = 0; i < MAX_OPT_IN; i++)
        if (!g_opt_in[i].kernel || g_opt_in[i].kernel == kernel) {
            g_opt_in[i].kernel = kernel, g_opt_in[i].bytes = bytes;
            return;
        }
    fc_die("CUDA emulation: more than %d kernels opted in to more shared memory", MAX_OPT_IN);
}
static size_t smem_allowed(const void *kernel) {
    for (int i = 0; i < MAX_OPT_IN && g_opt_in[i].kernel; i++)
        if (g_opt_in[i].kernel == kernel) return (size_t)g_opt_in[i].bytes;
    return 48 << 10;
}

void fc_emu_default_stream_work(void);  // cuda_emu_runtime.cpp

void fc_emu_run_grid(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem,
                     const std::function<void()> &body) {
    if (g_cur) fc_die("CUDA emulation: %s launched from inside a kernel", name);
    fc_emu_default_stream_work();
    unsigned long nthreads = (unsigned long)block.x * block.y * block.z;
    if (nthreads == 0 || nthreads > MAX_BLOCK_THREADS || block.z > 64 || grid.x == 0 || grid.x > 0x7fffffffu ||
        grid.y == 0 || grid.y > 65535 || grid.z == 0 || grid.z > 65535)
        fc_die("CUDA emulation: %s: invalid launch configuration: grid (%u,%u,%u), block (%u,%u,%u)", name, grid.x,
               grid.y, grid.z, block.x, block.y, block.z);
    if (smem > smem_allowed(kernel))
        fc_die("CUDA emulation: %s: %zu bytes of dynamic shared memory, %zu allowed (cudaFuncSetAttribute)", name,
               smem, smem_allowed(kernel));
    static unsigned char *smem_buf;
    static size_t smem_cap;
    if (smem > smem_cap) free(smem_buf), smem_buf = (unsigned char *)malloc(smem), smem_cap = smem;
    for (int i = 0; i < (int)nthreads; i++)
        if (!g_fiber[i].stack) fiber_create(&g_fiber[i]);
    g_body = &body, g_kernel_name = name;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                if (smem) memset(smem_buf, 0xff, smem);  // NaN until written
                g_smem = smem ? smem_buf : NULL;
                g_block_serial++;  // every static __shared__ variable undefined again (fc_emu_shared)
                for (int i = 0; i < (int)nthreads; i++) {
                    Fiber *f = &g_fiber[i];
                    f->state = READY;
                    f->npending = f->commits = 0;
                    f->coords.thread = make_uint3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
                    f->coords.block = make_uint3(bx, by, bz);
                    f->coords.block_dim = block, f->coords.grid_dim = grid;
                }
                run_block((int)nthreads, (bx + by + bz) & 1);
            }
    g_body = NULL;
}
