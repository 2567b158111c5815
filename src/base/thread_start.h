// thread_start.h: whether the threads a command asks for can start, said before the command runs.
//
// libgomp starts its threads at the first parallel region, and where one cannot start (the limit of
// processes a user may run, ulimit -u; no address space for its stack) it ends the process with
// "libgomp: Thread creation failed", naming neither the limit nor what to change.
#ifndef FRAMECHAIN_THREAD_START_H
#define FRAMECHAIN_THREAD_START_H

// Starts threads - 1 threads with the stack libgomp will give its own (fc_thread_stack_bytes), all
// alive at once as libgomp's team is, and ends them. Where one cannot start: one line on stderr naming
// the limits that bound it, exit(1).
void fc_threads_start_check(int threads);

#endif
