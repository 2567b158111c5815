// safetensors.h: writing safetensors files (https://huggingface.co/docs/safetensors), crash-safe.
#ifndef FRAMECHAIN_SAFETENSORS_H
#define FRAMECHAIN_SAFETENSORS_H

#include <stddef.h>

typedef struct {
    const char *name;
    const char *dtype;  // "F64", "F32", "I32", "U8", ...
    int ndim;
    long shape[8];
    const void *data;   // host memory, numel * dtype size bytes, little-endian
} StTensor;

typedef struct {
    const char *key, *value;
} StMeta;

// Write the tensors and metadata to `path`: into a temporary file in the same folder, fsync,
// rename over `path`, fsync the folder. Wider dtypes come first so every tensor stays aligned.
// Returns 0, or -1 with a one-line reason in err (the previous file at `path` is then untouched).
int st_write(const char *path, const StTensor *tensors, int n, const StMeta *meta, int nmeta, char *err,
             size_t errlen);

// Size in bytes of one element of `dtype`, 0 when unknown.
size_t st_dtype_size(const char *dtype);

#endif
