// registry.h: the backends a build has, and choosing one by name. It sits above both backends
// (src/backend/cpu/ and cuda/), which know nothing of each other or of it.
#ifndef FRAMECHAIN_REGISTRY_H
#define FRAMECHAIN_REGISTRY_H

#include <stdio.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/op_table.h"
#include "cuda/backend_cuda.h"

// Backend by name ("cpu", "cuda", "cuda-fp32", "auto"); dies with one clear line when it cannot be had.
const Backend *backend_select(const char *name);
// 1 when name is a --device backend_select knows (cpu, cuda, cuda-fp32, auto), whether or not it can be had.
int backend_device_known(const char *name);
// Which backends this build has, for --version.
void backend_print_versions(FILE *out);

#endif
