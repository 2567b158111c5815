// sha256.h: SHA-256 (FIPS 180-4), for the identity of the autoencoder a latent dataset was made with.
#ifndef FRAMECHAIN_SHA256_H
#define FRAMECHAIN_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t bytes;    // hashed so far
    uint8_t block[64];
    size_t used;       // bytes waiting in block
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t n);
// The digest as 64 lowercase hex digits and a NUL.
void sha256_hex(Sha256 *s, char hex[65]);
// The file's SHA-256 into hex. 0, or -1 with one line naming the file.
int sha256_file(const char *path, char hex[65], char *err, size_t errlen);
// The same of the file open on fd, read from its start (path names it in err).
int sha256_fd(int fd, const char *path, char hex[65], char *err, size_t errlen);

#endif
