// op_table.h: checking that a backend fills in the whole op contract (backend.h). The CUDA backend
// checks its tables when it starts; tests/backend/test_op_table.c checks the CPU's, and that the
// list of ops names every op of backend.h.
#ifndef FRAMECHAIN_OP_TABLE_H
#define FRAMECHAIN_OP_TABLE_H

#include <stddef.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif
// The name of the first op of the table that is NULL, or NULL when the table is complete.
const char *backend_missing_op(const Backend *be);
// The i-th op of the list (0, 1, ...): its name, its offset in Backend and whether it may be NULL;
// NULL past the end.
const char *backend_op(int i, size_t *offset, int *optional);
#ifdef __cplusplus
}
#endif

#endif
