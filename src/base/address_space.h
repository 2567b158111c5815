// address_space.h: the address space a process may take (ulimit -v), said before it runs out.
//
// OpenBLAS 0.3 reserves a buffer of 128 MiB for each thread that calls it, at its start and at a
// thread's first GEMM, and where the address space cannot take one it retries for ever: the program
// stops responding, before main() when the limit is low enough. framechain checks the limit first.
#ifndef FRAMECHAIN_ADDRESS_SPACE_H
#define FRAMECHAIN_ADDRESS_SPACE_H

#define FC_BLAS_BUFFER_BYTES (128.0 * 1048576 + 4096)  // one OpenBLAS buffer and its guard page

// The limit to advise for `bytes` of address space, in KiB as ulimit takes it: rounded up to a MiB and
// 16 MiB over, as what a process maps at its start varies by a few pages from one start to the next.
double fc_address_space_advice_kib(double bytes);
// Whether `need` more bytes fit both address-space limits, RLIMIT_AS (ulimit -v, against every
// mapping) and RLIMIT_DATA (ulimit -d, against the private writable ones): 1, or 0 with the limit they
// do not fit, what it counts now, and its ulimit option ("ulimit -v").
int fc_address_space_room(double need, double *limit, double *used, const char **ulimit);
// What the address space must still take for a run of `threads` threads beside its memory plan: the
// OpenBLAS buffers its threads will add to those of OpenBLAS's start, and a margin.
double fc_address_space_to_come(int threads);
// The stack each OpenMP thread maps, in bytes, and what sets it ("OMP_STACKSIZE", "GOMP_STACKSIZE" or
// "ulimit -s"), as fc_address_space_check_start found them.
double fc_thread_stack_bytes(const char **source);
// " and their stacks of 512 MiB (OMP_STACKSIZE)" where a thread's stack counts for more than the margin
// fc_address_space_to_come gives a thread, else "": said after "OpenBLAS's buffers for N threads".
const char *fc_thread_stack_clause(char *buf, size_t n);
// Before any library's start-up (main.c calls it from .preinit_array, with the process's arguments
// and environment): where the limit cannot take OpenBLAS's buffers for the threads the command line
// asks for and a margin for the program, one line on stderr and _exit(1).
void fc_address_space_check_start(int argc, char **argv, char **envp);

#endif
