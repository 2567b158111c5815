// cpu_backend.h: the CPU reference backend's entry point (fp32, OpenMP, OpenBLAS).
#ifndef FRAMECHAIN_CPU_BACKEND_H
#define FRAMECHAIN_CPU_BACKEND_H

#include "backend/backend.h"

// The CPU backend's op table (always built).
const Backend *backend_cpu(void);

#endif
