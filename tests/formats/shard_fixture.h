// shard_fixture.h: what the dataset's tests (test_shards.c, test_shard_damage.c, test_loader.c,
// test_latent_data.c, test_synthetic.c) share: their main (a scratch folder under g_root), damaging
// a file in place, small file helpers, clip content (random, tagged, smooth) and writing a dataset
// of such clips.
#ifndef FRAMECHAIN_TEST_SHARD_FIXTURE_H
#define FRAMECHAIN_TEST_SHARD_FIXTURE_H

#include <fcntl.h>
#include <ftw.h>  // nftw: the including file defines _GNU_SOURCE before its first #include
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "base/clock.h"
#include "base/common.h"
#include "base/philox.h"
#include "formats/shards.h"

// The test's scratch folder (mkdtemp'ed by main, removed at the end).
static char g_root[256];

static inline int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static inline void rm_rf(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static inline void folder(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", g_root, name);
    rm_rf(buf);
}

static inline void flip_byte(const char *path, long pos) {
    int fd = open(path, O_RDWR);
    uint8_t b;
    if (pread(fd, &b, 1, pos) != 1) abort();
    b ^= 0x5A;
    if (pwrite(fd, &b, 1, pos) != 1) abort();
    close(fd);
}

static inline int one_line(const char *s) { return s[0] && !strchr(s, '\n'); }

// A test's main: `tests` run in a fresh scratch folder /tmp/fc_test_<name>_XXXXXX, removed after them;
// then the line "test_<name>: <seconds> s, <count> failed". Returns the exit status.
static inline int run_in_scratch(const char *name, void (*tests)(void)) {
    snprintf(g_root, sizeof g_root, "/tmp/fc_test_%s_XXXXXX", name);
    if (!mkdtemp(g_root)) {
        perror("mkdtemp");
        return 1;
    }
    double t0 = fc_now_s();
    tests();
    rm_rf(g_root);
    printf("test_%s: %.1f s, %d failed\n", name, fc_now_s() - t0, g_failed);
    return g_failed != 0;
}

// ---- files ----

static inline int exists(const char *dir, const char *name) {
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

static inline long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

static inline void write_text(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, n, f);
    fclose(f);
}

static inline void copy_dir(const char *from, const char *to) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    if (system(cmd)) abort();
}

// ---- clip content ----

// Random bytes: zlib cannot shrink them, so the clip is stored raw.
static inline void clip_random(uint8_t *c, size_t n, uint32_t id) {
    for (size_t i = 0; i < n; i += 4) {
        uint32_t u = philox_u32(77, id, RNG_TEST, i / 4);
        for (size_t k = 0; k < 4 && i + k < n; k++) c[i + k] = (uint8_t)(u >> (8 * k));
    }
}

// A tagged clip: red = the frame index, green = the clip's id, blue = a left-to-right ramp (so a
// window tells which clip and frames it shows and whether it is mirrored). zlib shrinks it.
static inline void clip_tagged(uint8_t *c, int F, int N, int id) {
    for (int t = 0; t < F; t++)
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) {
                uint8_t *p = c + (((size_t)t * N + y) * N + x) * 3;
                p[0] = (uint8_t)t, p[1] = (uint8_t)id, p[2] = (uint8_t)(N > 1 ? x * 255 / (N - 1) : 0);
            }
}

// Random bytes with row 0 tagged as clip_tagged does: stored raw, yet a window still tells what it shows.
static inline void clip_tagged_random(uint8_t *c, int F, int N, int id) {
    size_t frame = (size_t)N * N * 3;
    clip_random(c, frame * F, (uint32_t)(1000 + id));
    uint8_t *tags = fc_malloc(frame * F);
    clip_tagged(tags, F, N, id);
    for (int t = 0; t < F; t++) memcpy(c + frame * t, tags + frame * t, (size_t)N * 3);
    free(tags);
}

// Smooth moving gradients with a little noise: what zlib does to real frames, about.
static inline void clip_smooth(uint8_t *c, int F, int N, int id) {
    for (int t = 0; t < F; t++)
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) {
                uint8_t *p = c + (((size_t)t * N + y) * N + x) * 3;
                uint32_t u = philox_u32(5, (uint32_t)id, RNG_TEST, ((uint64_t)t * N + y) * N + x);
                for (int ch = 0; ch < 3; ch++) {
                    double v = 128 + 90 * sin(0.07 * (x + 2 * t + 17 * id) + 0.05 * y * (ch + 1)) +
                               (int)(u >> (8 * ch) & 1);
                    p[ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
            }
}

// ---- writing datasets ----

typedef struct {
    char source[64];
    long first;
    double fps;
} ClipMeta;

// A dataset of n clips (kind per clip: 'r' random, 't' tagged, 's' smooth); the clips' bytes go to
// *clips (n * F*N*N*3) when asked for. Returns 0 or -1 (err filled).
static inline int make_dataset(const char *dir, int N, int F, const char *kinds, size_t max_shard,
                               uint8_t **clips, ClipMeta *meta, char *err, size_t errlen) {
    int n = (int)strlen(kinds);
    size_t raw = (size_t)F * N * N * 3;
    ShardWriter *w = shard_writer_open(dir, N, F, max_shard, err, errlen);
    if (!w) return -1;
    uint8_t *all = fc_malloc(raw * (size_t)n);
    for (int i = 0; i < n; i++) {
        uint8_t *c = all + raw * (size_t)i;
        if (kinds[i] == 'r') clip_random(c, raw, (uint32_t)i);
        else if (kinds[i] == 't') clip_tagged(c, F, N, i);
        else if (kinds[i] == 'm') clip_tagged_random(c, F, N, i);
        else clip_smooth(c, F, N, i);
        char src[64];
        long first = 100L * i + 3;
        double fps = i % 3 == 0 ? 25 : i % 3 == 1 ? 29.97 : 0;
        snprintf(src, sizeof src, "videos/in-%02d.mp4", i);
        if (meta) snprintf(meta[i].source, sizeof meta[i].source, "%s", src), meta[i].first = first, meta[i].fps = fps;
        if (shard_writer_add(w, c, src, first, fps, err, errlen)) {
            shard_writer_abort(w);
            free(all);
            return -1;
        }
    }
    int rc = shard_writer_finish(w, err, errlen);
    if (clips) *clips = all;
    else free(all);
    return rc;
}

#endif
