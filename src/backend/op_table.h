// op_table.h: checking that a backend fills in the whole op contract (backend.h). Each backend
// checks its own table when it starts; tests/cuda/test_cuda.c checks both.
#ifndef FRAMECHAIN_OP_TABLE_H
#define FRAMECHAIN_OP_TABLE_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif
// The name of the first op of the table that is NULL, or NULL when the table is complete.
const char *backend_missing_op(const Backend *be);
#ifdef __cplusplus
}
#endif

#endif
