// test_shards.c: the clip dataset (shards.c) and the batch loader (loader.c): a round trip across
// several shards, crash safety (an aborted writer, kill -9 mid-write, stale temporary files),
// corrupt and truncated files, header-only reads, and the loader against a direct computation of
// every window from (seed, step, window), across thread counts, prefetch depths and resumes.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "common.h"
#include "config.h"
#include "loader.h"
#include "philox.h"
#include "safetensors.h"
#include "shards.h"

static char g_root[256];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_rf(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void folder(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", g_root, name);
    rm_rf(buf);
}

static int exists(const char *dir, const char *name) {
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

static void flip_byte(const char *path, long pos) {
    int fd = open(path, O_RDWR);
    uint8_t b;
    if (pread(fd, &b, 1, pos) != 1) abort();
    b ^= 0x5A;
    if (pwrite(fd, &b, 1, pos) != 1) abort();
    close(fd);
}

static void write_text(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, n, f);
    fclose(f);
}

static void copy_dir(const char *from, const char *to) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    if (system(cmd)) abort();
}

static int one_line(const char *s) { return s[0] && !strchr(s, '\n'); }

// ---- clip content ----

// Random bytes: zlib cannot shrink them, so the clip is stored raw.
static void clip_random(uint8_t *c, size_t n, uint32_t id) {
    for (size_t i = 0; i < n; i += 4) {
        uint32_t u = philox_u32(77, id, RNG_TEST, i / 4);
        for (size_t k = 0; k < 4 && i + k < n; k++) c[i + k] = (uint8_t)(u >> (8 * k));
    }
}

// A tagged clip: red = the frame index, green = the clip's id, blue = a left-to-right ramp (so a
// window tells which clip and frames it shows and whether it is mirrored). zlib shrinks it.
static void clip_tagged(uint8_t *c, int F, int N, int id) {
    for (int t = 0; t < F; t++)
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) {
                uint8_t *p = c + (((size_t)t * N + y) * N + x) * 3;
                p[0] = (uint8_t)t, p[1] = (uint8_t)id, p[2] = (uint8_t)(N > 1 ? x * 255 / (N - 1) : 0);
            }
}

// Random bytes with row 0 tagged as clip_tagged does: stored raw, yet a window still tells what it shows.
static void clip_tagged_random(uint8_t *c, int F, int N, int id) {
    size_t frame = (size_t)N * N * 3;
    clip_random(c, frame * F, (uint32_t)(1000 + id));
    uint8_t *tags = fc_malloc(frame * F);
    clip_tagged(tags, F, N, id);
    for (int t = 0; t < F; t++) memcpy(c + frame * t, tags + frame * t, (size_t)N * 3);
    free(tags);
}

// Smooth moving gradients with a little noise: what zlib does to real frames, about.
static void clip_smooth(uint8_t *c, int F, int N, int id) {
    for (int t = 0; t < F; t++)
        for (int y = 0; y < N; y++)
            for (int x = 0; x < N; x++) {
                uint8_t *p = c + (((size_t)t * N + y) * N + x) * 3;
                uint32_t u = philox_u32(5, (uint32_t)id, RNG_TEST, ((uint64_t)t * N + y) * N + x);
                for (int ch = 0; ch < 3; ch++) {
                    double v = 128 + 90 * sin(0.07 * (x + 2 * t + 17 * id) + 0.05 * y * (ch + 1)) + (int)(u >> (8 * ch) & 1);
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
static int make_dataset(const char *dir, int N, int F, const char *kinds, size_t max_shard, uint8_t **clips,
                        ClipMeta *meta, char *err, size_t errlen) {
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

// ---- the round trip ----

static void test_roundtrip(void) {
    const int N = 16, F = 8, n = 12;
    size_t raw = (size_t)F * N * N * 3;
    char dir[512], err[1024];
    folder(dir, sizeof dir, "roundtrip");
    uint8_t *clips;
    ClipMeta meta[12];
    int rc = make_dataset(dir, N, F, "rsrsrsrsrrss", 2 * raw + 100, &clips, meta, err, sizeof err);
    check(rc == 0 && exists(dir, "dataset.json") && exists(dir, "manifest.tsv"), "shards_write",
          "%s", rc ? err : "12 clips of 8 frames of 16x16 written, with dataset.json and manifest.tsv");
    if (rc) return;
    Dataset *d = dataset_open(dir, err, sizeof err);
    check(d != NULL, "shards_open", "%s", d ? "dataset.json and every shard header accepted" : err);
    if (!d) return;
    check(dataset_clips(d) == n && dataset_frame_size(d) == N && dataset_clip_frames(d) == F &&
              dataset_clip_bytes(d) == raw,
          "shards_open_sizes", "%d clips, frame size %d, %d frames, %zu bytes a clip", dataset_clips(d),
          dataset_frame_size(d), dataset_clip_frames(d), dataset_clip_bytes(d));
    // every clip back, byte for byte, with both encodings in use
    uint8_t *buf = fc_malloc(raw);
    int same = 0, zlib = 0, rawn = 0;
    size_t stored = 0;
    for (int i = 0; i < n; i++) {
        ClipLocation loc;
        if (dataset_read_clip(d, i, buf, err, sizeof err) == 0 && !memcmp(buf, clips + raw * i, raw)) same++;
        else printf("  clip %d: %s\n", i, err);
        if (!dataset_clip_location(d, i, &loc)) zlib += loc.zlib, rawn += !loc.zlib, stored += loc.stored;
    }
    check(same == n, "shards_read_back_exact", "%d of %d clips byte-exact", same, n);
    check(zlib > 0 && rawn > 0, "shards_both_encodings", "%d zlib, %d raw; %zu stored bytes for %zu raw (%.1f%%)", zlib,
          rawn, stored, raw * n, 100.0 * stored / (raw * n));
    // several shards, each within the cap unless it holds a single clip; each a valid shard on its own
    int ns = dataset_shards(d), within = 1, valid = 0, names_ok = 1;
    char first_err[1024] = "";
    for (int s = 0; s < ns; s++) {
        char path[600], name[64];
        snprintf(name, sizeof name, "shard-%05d.safetensors", s);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        StFile f;
        if (st_read_header(path, &f, err, sizeof err)) {
            names_ok = 0;
            continue;
        }
        size_t data = f.size - f.data_start;
        if (data > 2 * raw + 100 && f.n > 1) within = 0;
        st_free(&f);
        size_t len;
        uint8_t *bytes = test_read_file(path, &len);
        if (!shard_check_bytes(bytes, len, err, sizeof err)) valid++;
        else if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", err);
        free(bytes);
    }
    check(ns >= 3 && within && names_ok, "shards_split_by_size", "%d shards, each at most %zu clip bytes or one clip",
          ns, 2 * raw + 100);
    check(valid == ns, "shards_check_bytes_accepts", "%d of %d shards pass shard_check_bytes%s%s", valid, ns,
          first_err[0] ? ": " : "", first_err);

    // metadata of a clip, as written
    {
        ClipLocation loc;
        dataset_clip_location(d, 1, &loc);
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, loc.shard);
        StFile f;
        int ok = !st_read_header(path, &f, err, sizeof err);
        char key[64];
        const char *v[5] = {0};
        static const char *fields[] = {"encoding", "crc32", "source", "first_frame", "fps"};
        for (int j = 0; ok && j < 5; j++) {
            snprintf(key, sizeof key, "clip.%d.%s", loc.index, fields[j]);
            v[j] = st_meta(&f, key);
        }
        char crc[16], first[24];
        snprintf(crc, sizeof crc, "%08x", (unsigned)crc32(0, clips + raw, (uInt)raw));
        snprintf(first, sizeof first, "%ld", meta[1].first);
        ok = ok && v[0] && v[1] && v[2] && v[3] && v[4] && !strcmp(v[0], loc.zlib ? "zlib" : "raw") &&
             !strcmp(v[1], crc) && !strcmp(v[2], meta[1].source) && !strcmp(v[3], first) && strtod(v[4], NULL) == 29.97;
        check(ok, "shards_clip_metadata", "clip.%d of %s: encoding %s, crc32 %s, source %s, first_frame %s, fps %s",
              loc.index, loc.shard, v[0] ? v[0] : "-", v[1] ? v[1] : "-", v[2] ? v[2] : "-", v[3] ? v[3] : "-",
              v[4] ? v[4] : "-");
        const char *fmt = ok ? st_meta(&f, "format") : NULL;
        check(fmt && !strcmp(fmt, "framechain-shard") && !strcmp(st_meta(&f, "format_version"), "1"),
              "shards_format_metadata", "format %s", fmt ? fmt : "-");
        if (ok) st_free(&f);
    }

    // manifest.tsv: a header and one line per clip, in order
    {
        char path[600];
        size_t len;
        snprintf(path, sizeof path, "%s/manifest.tsv", dir);
        char *text = (char *)test_read_file(path, &len);
        int lines = 0, good = 0;
        char *save = NULL;
        for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save), lines++) {
            if (lines == 0) {
                good += !strcmp(line, "shard\tclip\tsource\tfirst_frame\tframes\tfps");
                continue;
            }
            int i = lines - 1;
            ClipLocation loc;
            if (i >= n || dataset_clip_location(d, i, &loc)) continue;
            char shard[64], src[128];
            int k, frames;
            long first;
            double fps;
            if (sscanf(line, "%63[^\t]\t%d\t%127[^\t]\t%ld\t%d\t%lf", shard, &k, src, &first, &frames, &fps) == 6 &&
                !strcmp(shard, loc.shard) && k == loc.index && !strcmp(src, meta[i].source) && first == meta[i].first &&
                frames == F && fps == meta[i].fps)
                good++;
        }
        check(lines == n + 1 && good == n + 1, "shards_manifest", "%d lines, %d as expected (header + %d clips)", lines,
              good, n);
        free(text);
    }
    // dataset.json: the totals and every shard with its clips and its file's size
    {
        char path[600], want[256];
        size_t len;
        snprintf(path, sizeof path, "%s/dataset.json", dir);
        char *text = (char *)test_read_file(path, &len);
        int found = 0;
        for (int s = 0; s < ns; s++) {
            char spath[600], name[64];
            snprintf(name, sizeof name, "shard-%05d.safetensors", s);
            snprintf(spath, sizeof spath, "%s/%s", dir, name);
            int clips_in = 0;
            for (int i = 0; i < n; i++) {
                ClipLocation loc;
                dataset_clip_location(d, i, &loc);
                clips_in += !strcmp(loc.shard, name);
            }
            snprintf(want, sizeof want, "{\"file\": \"%s\", \"clips\": %d, \"bytes\": %ld}", name, clips_in,
                     file_size(spath));
            found += strstr(text, want) != NULL;
        }
        snprintf(want, sizeof want,
                 "{\"format\": \"framechain-dataset\", \"format_version\": 1, \"frame_size\": %d, \"clip_frames\": %d, "
                 "\"clips\": %d,",
                 N, F, n);
        int head = strncmp(text, want, strlen(want)) == 0;
        check(head && found == ns, "shards_dataset_json", "totals %s, %d of %d shard entries match their files",
              head ? "match" : "differ", found, ns);
        free(text);
    }
    dataset_close(d);
    free(buf);
    free(clips);

    // sources that are not plain: a tab and a newline (escaped in the manifest), invalid UTF-8
    {
        char dir2[512];
        folder(dir2, sizeof dir2, "odd_sources");
        ShardWriter *w = shard_writer_open(dir2, 4, 2, 0, err, sizeof err);
        uint8_t c[4 * 4 * 3 * 2];
        clip_random(c, sizeof c, 1);
        int ok = w && !shard_writer_add(w, c, "a\tb\nc\\d.mp4", 0, 30, err, sizeof err) &&
                 !shard_writer_add(w, c, "caf\xe9.mp4", 5, 12.5, err, sizeof err) && !shard_writer_finish(w, err, sizeof err);
        size_t len;
        char path[600];
        snprintf(path, sizeof path, "%s/manifest.tsv", dir2);
        char *text = ok ? (char *)test_read_file(path, &len) : NULL;
        snprintf(path, sizeof path, "%s/shard-00000.safetensors", dir2);
        StFile f;
        int st = ok && !st_read(path, &f, err, sizeof err);
        const char *s0 = st ? st_meta(&f, "clip.0.source") : NULL, *s1 = st ? st_meta(&f, "clip.1.source") : NULL;
        check(text && strstr(text, "a\\tb\\nc\\\\d.mp4\t0\t2\t30\n") && strstr(text, "caf\xef\xbf\xbd.mp4\t5\t2\t12.5\n") &&
                  s0 && !strcmp(s0, "a\tb\nc\\d.mp4") && s1 && !strcmp(s1, "caf\xef\xbf\xbd.mp4"),
              "shards_odd_sources", "%s", ok ? "tab, newline, backslash escaped in the manifest; invalid UTF-8 as U+FFFD" : err);
        if (st) st_free(&f);
        free(text);
    }
}

// ---- header-only reads ----

static void test_read_header(void) {
    char dir[512], err[1024], path[600];
    folder(dir, sizeof dir, "header");
    int rc = make_dataset(dir, 8, 4, "rsr", 0, NULL, NULL, err, sizeof err);
    snprintf(path, sizeof path, "%s/shard-00000.safetensors", dir);
    StFile a, b;
    int ra = rc ? -1 : st_read(path, &a, err, sizeof err), rb = rc ? -1 : st_read_header(path, &b, err, sizeof err);
    int same = ra == 0 && rb == 0 && a.n == b.n && a.nmeta == b.nmeta && a.size == b.size && a.data_start == b.data_start;
    for (int i = 0; same && i < a.n; i++)
        same = !strcmp(a.entries[i].name, b.entries[i].name) && a.entries[i].begin == b.entries[i].begin &&
               a.entries[i].end == b.entries[i].end && !strcmp(a.entries[i].dtype, b.entries[i].dtype);
    for (int i = 0; same && i < a.nmeta; i++)
        same = !strcmp(a.meta_keys[i], b.meta_keys[i]) && !strcmp(a.meta_values[i], b.meta_values[i]);
    check(same, "st_read_header_matches_st_read", "%d tensors, %d metadata entries, data at %zu of %zu bytes", a.n,
          a.nmeta, a.data_start, a.size);
    if (!ra) st_free(&a);
    if (!rb) st_free(&b);

    // a 4 GiB sparse file: only its header is read
    char big[600];
    snprintf(big, sizeof big, "%s/big.safetensors", dir);
    const char *hdr = "{\"x\":{\"dtype\":\"U8\",\"shape\":[4294967296],\"data_offsets\":[0,4294967296]}}";
    size_t hn = (strlen(hdr) + 7) / 8 * 8;
    uint8_t head[256];
    memset(head, ' ', sizeof head);
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    memcpy(head + 8, hdr, strlen(hdr));
    int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int ok = fd >= 0 && write(fd, head, 8 + hn) == (ssize_t)(8 + hn) && !ftruncate(fd, (off_t)(8 + hn) + ((off_t)1 << 32));
    if (fd >= 0) close(fd);
    double t0 = now_s();
    rc = ok ? st_read_header(big, &a, err, sizeof err) : -1;
    double dt = now_s() - t0;
    check(rc == 0 && a.size == 8 + hn + ((size_t)1 << 32) && dt < 0.5, "st_read_header_reads_only_the_header",
          "%s: %zu bytes, header read in %.2f ms", rc ? err : "accepted", rc ? 0 : a.size, 1e3 * dt);
    if (!rc) st_free(&a);
    // one byte short: the layout check sees it without the data
    fd = open(big, O_WRONLY);
    ok = fd >= 0 && !ftruncate(fd, (off_t)(8 + hn) + ((off_t)1 << 32) - 1);
    if (fd >= 0) close(fd);
    rc = st_read_header(big, &a, err, sizeof err);
    check(ok && rc == -1 && one_line(err) && strstr(err, big) && strstr(err, "beyond the data section"),
          "st_read_header_short_file", "%s", err);
    unlink(big);
    // st_parse_header with fewer bytes than the header
    rc = st_parse_header(&a, head, 20, 8 + hn + 10, err, sizeof err);
    check(rc == -1 && one_line(err) && a.bytes == NULL, "st_parse_header_needs_the_header", "%s", err);
}

// ---- crash safety ----

static void test_crash_safety(void) {
    const int N = 8, F = 4;
    size_t raw = (size_t)F * N * N * 3;
    char dir[512], err[1024], path[600];
    uint8_t *c = fc_malloc(raw);
    clip_random(c, raw, 9);

    // abort half-way: shards on disk, no dataset.json, a clear refusal
    folder(dir, sizeof dir, "aborted");
    ShardWriter *w = shard_writer_open(dir, N, F, raw, err, sizeof err);
    int added = 0;
    for (int i = 0; w && i < 5; i++) added += !shard_writer_add(w, c, "x.mp4", i, 25, err, sizeof err);
    shard_writer_abort(w);
    Dataset *d = dataset_open(dir, err, sizeof err);
    check(added == 5 && exists(dir, "shard-00000.safetensors") && !exists(dir, "dataset.json") && !d && one_line(err) &&
              strstr(err, "no dataset.json"),
          "shards_abort_leaves_no_dataset", "%s", err);
    dataset_close(d);

    // no clip at all: finish refuses and writes nothing
    folder(dir, sizeof dir, "empty");
    w = shard_writer_open(dir, N, F, 0, err, sizeof err);
    int rc = w ? shard_writer_finish(w, err, sizeof err) : 0;
    check(w && rc == -1 && one_line(err) && !exists(dir, "dataset.json"), "shards_finish_without_clips", "%s", err);

    // a stale temporary file is ignored by the reader and removed by the next writer
    folder(dir, sizeof dir, "stale");
    rc = make_dataset(dir, N, F, "rrr", 0, NULL, NULL, err, sizeof err);
    snprintf(path, sizeof path, "%s/shard-00000.safetensors.tmp-99999", dir);
    write_text(path, "junk", 4);
    snprintf(path, sizeof path, "%s/dataset.json.tmp-99999", dir);
    write_text(path, "{", 1);
    d = rc ? NULL : dataset_open(dir, err, sizeof err);
    check(d && dataset_clips(d) == 3, "shards_stale_temp_ignored", "%s", d ? "the dataset opens beside 2 stale temporary files" : err);
    dataset_close(d);
    char dir2[512];
    folder(dir2, sizeof dir2, "stale2");
    mkdir(dir2, 0755);
    snprintf(path, sizeof path, "%s/shard-00003.safetensors.tmp-4242", dir2);
    write_text(path, "junk", 4);
    w = shard_writer_open(dir2, N, F, 0, err, sizeof err);
    check(w && !exists(dir2, "shard-00003.safetensors.tmp-4242"), "shards_writer_removes_stale_temps", "%s",
          w ? "removed at open" : err);
    shard_writer_abort(w);
    // a folder that already holds a dataset is refused
    w = shard_writer_open(dir, N, F, 0, err, sizeof err);
    check(!w && one_line(err) && strstr(err, "already holds a dataset"), "shards_writer_refuses_existing", "%s", err);
    shard_writer_abort(w);

    // kill -9 at moments all through a prepare (timed by one run left alone): never a dataset.json
    // that names a bad shard
    int none = 0, whole = 0, bad = 0;
    double full = 0;
    for (int k = -1; k < 10; k++) {
        char kd[512];
        snprintf(kd, sizeof kd, "%s/killed-%d", g_root, k);
        rm_rf(kd);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("FRAMECHAIN_TEST_WRITE_DELAY_MS", "15", 1);
            char e[1024];
            ShardWriter *cw = shard_writer_open(kd, N, F, raw, e, sizeof e);
            for (int i = 0; cw && i < 6; i++)
                if (shard_writer_add(cw, c, "y.mp4", i, 25, e, sizeof e)) _exit(3);
            _exit(cw && !shard_writer_finish(cw, e, sizeof e) ? 0 : 3);
        }
        int status;
        if (k < 0) {  // the run left alone, for its duration
            double t0 = now_s();
            waitpid(pid, &status, 0);
            full = now_s() - t0;
            rm_rf(kd);
            continue;
        }
        usleep((useconds_t)(1e6 * full * k / 8));  // from the start to beyond the end
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        Dataset *kdset = dataset_open(kd, err, sizeof err);
        if (!exists(kd, "dataset.json")) {
            none += !kdset && one_line(err) && (strstr(err, "no dataset.json") || strstr(err, "no such folder"));
            bad += kdset != NULL;
        } else if (kdset) {
            uint8_t *buf = fc_malloc(raw);
            int okc = 0;
            for (int i = 0; i < dataset_clips(kdset); i++) okc += !dataset_read_clip(kdset, i, buf, err, sizeof err);
            if (okc == 6 && dataset_clips(kdset) == 6) whole++;
            else bad++;
            free(buf);
        } else {
            bad++;
        }
        dataset_close(kdset);
        rm_rf(kd);
    }
    check(bad == 0 && none + whole == 10 && none > 0, "shards_kill9_mid_prepare",
          "10 kills over a %.0f ms prepare: %d left no dataset.json, %d a whole dataset, %d anything else",
          1e3 * full, none, whole, bad);
    free(c);
}

// ---- corruption ----

static void test_corruption(void) {
    const int N = 16, F = 8;
    size_t raw = (size_t)F * N * N * 3;
    char good[512], dir[512], err[1024], path[700];
    folder(good, sizeof good, "good");
    if (make_dataset(good, N, F, "rsrsrs", 2 * raw, NULL, NULL, err, sizeof err)) {
        check(0, "shards_corruption_setup", "%s", err);
        return;
    }
    uint8_t *buf = fc_malloc(raw);
    Dataset *d0 = dataset_open(good, err, sizeof err);
    int raw_clip = -1, zlib_clip = -1;
    for (int i = 0; d0 && i < dataset_clips(d0); i++) {
        ClipLocation loc;
        dataset_clip_location(d0, i, &loc);
        if (loc.zlib && zlib_clip < 0) zlib_clip = i;
        if (!loc.zlib && raw_clip < 0 && i > 0) raw_clip = i;
    }
    ClipLocation lr, lz;
    dataset_clip_location(d0, raw_clip, &lr);
    dataset_clip_location(d0, zlib_clip, &lz);
    char lr_shard[64], lz_shard[64];
    snprintf(lr_shard, sizeof lr_shard, "%s", lr.shard);
    snprintf(lz_shard, sizeof lz_shard, "%s", lz.shard);
    dataset_close(d0);

    // a flipped byte in a raw clip: the header still opens, the clip's CRC does not match
    snprintf(dir, sizeof dir, "%s/flip_raw", g_root);
    copy_dir(good, dir);
    snprintf(path, sizeof path, "%s/%s", dir, lr_shard);
    flip_byte(path, (long)(lr.offset + lr.stored / 2));
    Dataset *d = dataset_open(dir, err, sizeof err);
    int rc = d ? dataset_read_clip(d, raw_clip, buf, err, sizeof err) : 0;
    char want[64];
    snprintf(want, sizeof want, "clip.%d ", lr.index);
    check(d && rc == -1 && one_line(err) && strstr(err, "CRC32 mismatch") && strstr(err, lr_shard) && strstr(err, want),
          "shards_flipped_byte_raw", "%s", err);
    int others = 0;
    for (int i = 0; d && i < dataset_clips(d); i++) others += i != raw_clip && !dataset_read_clip(d, i, buf, err, sizeof err);
    check(d && others == dataset_clips(d) - 1, "shards_flipped_byte_other_clips_fine", "%d other clips read", others);
    size_t len;
    uint8_t *bytes = test_read_file(path, &len);
    rc = shard_check_bytes(bytes, len, err, sizeof err);
    check(rc == -1 && strstr(err, "CRC32"), "shard_check_bytes_flipped_byte", "%s", err);
    free(bytes);
    dataset_close(d);

    // a flipped byte in a zlib clip: an inflate or CRC error naming the clip and the shard
    snprintf(dir, sizeof dir, "%s/flip_zlib", g_root);
    copy_dir(good, dir);
    snprintf(path, sizeof path, "%s/%s", dir, lz_shard);
    flip_byte(path, (long)(lz.offset + lz.stored / 2));
    d = dataset_open(dir, err, sizeof err);
    rc = d ? dataset_read_clip(d, zlib_clip, buf, err, sizeof err) : 0;
    snprintf(want, sizeof want, "clip.%d ", lz.index);
    check(d && rc == -1 && one_line(err) && strstr(err, lz_shard) && strstr(err, want), "shards_flipped_byte_zlib", "%s",
          err);
    dataset_close(d);

    // a truncated shard: refused at open, naming it
    snprintf(dir, sizeof dir, "%s/truncated", g_root);
    copy_dir(good, dir);
    snprintf(path, sizeof path, "%s/shard-00001.safetensors", dir);
    if (truncate(path, file_size(path) - 7)) abort();
    d = dataset_open(dir, err, sizeof err);
    check(!d && one_line(err) && strstr(err, "shard-00001.safetensors"), "shards_truncated_at_open", "%s", err);
    dataset_close(d);
    // truncated after opening: the read says so
    snprintf(dir, sizeof dir, "%s/truncated_later", g_root);
    copy_dir(good, dir);
    d = dataset_open(dir, err, sizeof err);
    snprintf(path, sizeof path, "%s/%s", dir, lr_shard);
    if (truncate(path, (off_t)lr.offset + 10)) abort();
    rc = d ? dataset_read_clip(d, raw_clip, buf, err, sizeof err) : 0;
    check(d && rc == -1 && one_line(err) && strstr(err, lr_shard) && strstr(err, "changed"), "shards_truncated_after_open",
          "%s", err);
    dataset_close(d);
    // a missing shard
    snprintf(dir, sizeof dir, "%s/missing", g_root);
    copy_dir(good, dir);
    snprintf(path, sizeof path, "%s/shard-00002.safetensors", dir);
    unlink(path);
    d = dataset_open(dir, err, sizeof err);
    check(!d && one_line(err) && strstr(err, "shard-00002.safetensors") && strstr(err, "cannot open"), "shards_missing_shard",
          "%s", err);
    dataset_close(d);

    // damaged dataset.json: each refused with one line naming the file
    char json_path[600];
    snprintf(json_path, sizeof json_path, "%s/dataset.json", good);
    size_t jlen;
    char *json = (char *)test_read_file(json_path, &jlen);
    struct {
        const char *name, *from, *to, *expect;
        int cut;
    } cases[] = {
        {"truncated", NULL, NULL, "line", (int)jlen / 2},
        {"empty", NULL, NULL, "expected '{'", 1},
        {"wrong_bytes", "\"bytes\": ", "\"bytes\": 1", "dataset.json says", 0},
        {"wrong_clips_total", "\"clips\": 6,", "\"clips\": 7,", "'clips' says 7", 0},
        {"version_2", "\"format_version\": 1", "\"format_version\": 2", "format_version 2 is not supported", 0},
        {"unknown_key", "\"frame_size\"", "\"frame_sise\"", "unknown key 'frame_sise'", 0},
        {"path_in_name", "shard-00000", "../x/00000", "not a plain name", 0},
        {"negative", "\"clip_frames\": ", "\"clip_frames\": -", "non-negative", 0},
        {"float", "\"frame_size\": 16", "\"frame_size\": 16.0", "must be an integer", 0},
        {"trailing", " ]}\n", " ]}\n}", "after the dataset's object", 0},
        {"wrong_frame_size", "\"frame_size\": 16", "\"frame_size\": 8", "but dataset.json says", 0},
    };
    int ncases = sizeof cases / sizeof cases[0];
    for (int i = 0; i < ncases; i++) {
        snprintf(dir, sizeof dir, "%s/json_%s", g_root, cases[i].name);
        copy_dir(good, dir);
        snprintf(path, sizeof path, "%s/dataset.json", dir);
        char text[8192];
        size_t n = 0;
        if (cases[i].from) {
            const char *at = strstr(json, cases[i].from);
            size_t pre = (size_t)(at - json), fl = strlen(cases[i].from), tl = strlen(cases[i].to);
            memcpy(text, json, pre);
            memcpy(text + pre, cases[i].to, tl);
            memcpy(text + pre + tl, at + fl, jlen - pre - fl);
            n = jlen - fl + tl;
        } else {
            n = (size_t)cases[i].cut - 1;
            memcpy(text, json, n);
        }
        write_text(path, text, n);
        d = dataset_open(dir, err, sizeof err);
        char label[96];
        snprintf(label, sizeof label, "dataset_json_%s", cases[i].name);
        check(!d && one_line(err) && strstr(err, "dataset.json") && strstr(err, cases[i].expect), label, "%s", err);
        dataset_close(d);
    }
    free(json);
    free(buf);
}

// ---- the loader ----

// Window b of step s, straight from the contract in loader.h.
static uint32_t ref_pick(uint64_t seed, int step, uint64_t base, uint32_t n) {
    uint64_t reject_from = 4294967296ull - 4294967296ull % n;
    for (int j = 0;; j++) {
        uint32_t u = philox_u32(seed, (uint32_t)step, RNG_DATA, base + (uint64_t)j);
        if (u < reject_from || j == 255) return u % n;
    }
}

static void ref_batch(const Dataset *d, const Config *c, int B, uint64_t seed, int step, real *out) {
    int N = dataset_frame_size(d), CF = dataset_clip_frames(d), lo = 0, hi = 0;
    for (int f = 0; f < c->slots; f++) {
        int o = (int)c->slot_offset[f];
        if (!f || o < lo) lo = o;
        if (!f || o > hi) hi = o;
    }
    uint8_t *clip = fc_malloc(dataset_clip_bytes(d));
    char err[1024];
    for (int b = 0; b < B; b++) {
        int k = (int)ref_pick(seed, step, (uint64_t)b * 512, (uint32_t)dataset_clips(d));
        int t0 = -lo + (int)ref_pick(seed, step, (uint64_t)b * 512 + 256, (uint32_t)(CF - (hi - lo)));
        int flip = philox_u32(seed, (uint32_t)step, RNG_AUG, ((uint64_t)1 << 48) + (uint64_t)b) >= 0x80000000u;
        if (dataset_read_clip(d, k, clip, err, sizeof err)) fc_die("%s", err);
        for (int f = 0; f < c->slots; f++)
            for (int ch = 0; ch < 3; ch++)
                for (int y = 0; y < N; y++)
                    for (int x = 0; x < N; x++) {
                        int t = t0 + (int)c->slot_offset[f], xs = flip ? N - 1 - x : x;
                        uint8_t p = clip[(((size_t)t * N + y) * N + xs) * 3 + ch];
                        out[((((size_t)b * c->slots + f) * 3 + ch) * N + y) * N + x] = (real)(p / 127.5 - 1.0);
                    }
    }
    free(clip);
}

static Config plan_config(int N, const char *plan) {
    Config c;
    char err[512], kv[512];
    config_defaults(&c);
    snprintf(kv, sizeof kv, "frame_size=%d", N);
    if (config_set_checked(&c, kv, "test", err, sizeof err)) fc_die("%s", err);
    snprintf(kv, sizeof kv, "plan=%s", plan);
    if (config_set_checked(&c, kv, "test", err, sizeof err)) fc_die("%s", err);
    return c;
}

// Batches first..last of a loader, concatenated (NULL on an error, which is printed).
static real *run_loader(const Dataset *d, const Config *c, int B, uint64_t seed, int first, int last, int threads,
                        int prefetch) {
    char err[1024];
    Loader *l = loader_start(NULL, d, c, B, seed, first, threads, prefetch, err, sizeof err);
    if (!l) {
        printf("  loader_start: %s\n", err);
        return NULL;
    }
    size_t per = (size_t)B * c->slots * 3 * c->frame_size * c->frame_size;
    real *all = fc_malloc(sizeof(real) * per * (size_t)(last - first + 1));
    for (int s = first; s <= last; s++) {
        double wait;
        const real *x = loader_get(l, s, &wait, err, sizeof err);
        if (!x) {
            printf("  loader_get(%d): %s\n", s, err);
            free(all);
            loader_stop(l);
            return NULL;
        }
        memcpy(all + per * (size_t)(s - first), x, sizeof(real) * per);
    }
    loader_stop(l);
    return all;
}

static void test_loader(void) {
    const int N = 12, F = 32, B = 6;
    const uint64_t seed = 1234;
    char dir[512], err[1024];
    folder(dir, sizeof dir, "loader");
    if (make_dataset(dir, N, F, "tttmtttmtt", 3 * (size_t)F * N * N * 3, NULL, NULL, err, sizeof err)) {
        check(0, "loader_setup", "%s", err);
        return;
    }
    Dataset *d = dataset_open(dir, err, sizeof err);
    if (!d) {
        check(0, "loader_setup", "%s", err);
        return;
    }
    int nz = 0;
    for (int i = 0; i < dataset_clips(d); i++) {
        ClipLocation loc;
        dataset_clip_location(d, i, &loc);
        nz += loc.zlib;
    }
    check(nz > 0 && nz < dataset_clips(d), "loader_dataset_mixed", "%d zlib and %d raw clips of %d frames of %dx%d in %d shards",
          nz, dataset_clips(d) - nz, F, N, N, dataset_shards(d));
    Config c = plan_config(N, "anchor:0 target:1 target:2 target:3 target:4 target:5 target:6");
    size_t per = (size_t)B * c.slots * 3 * N * N;
    real *ref = fc_malloc(sizeof(real) * per * 20);
    for (int s = 1; s <= 20; s++) ref_batch(d, &c, B, seed, s, ref + per * (size_t)(s - 1));

    real *a = run_loader(d, &c, B, seed, 1, 20, 1, 1);
    int eq = 0;
    for (int s = 0; a && s < 20; s++) eq += !memcmp(a + per * s, ref + per * s, sizeof(real) * per);
    check(eq == 20, "loader_matches_reference", "%d of 20 batches (%d windows of 7 slots) equal the direct computation",
          eq, B);
    real *b = run_loader(d, &c, B, seed, 1, 20, 3, 4);
    check(a && b && !memcmp(a, b, sizeof(real) * per * 20), "loader_threads_prefetch_invariant",
          "1 thread + prefetch 1 and 3 threads + prefetch 4: %zu values identical", per * 20);
    free(b);
    b = run_loader(d, &c, B, seed, 1, 20, 2, 2);
    check(a && b && !memcmp(a, b, sizeof(real) * per * 20), "loader_two_threads", "2 threads + prefetch 2 identical");
    free(b);
    free(a);
    free(ref);

    // resume: a loader started at step 50 gives the batches 50.. of one started at step 1
    a = run_loader(d, &c, B, seed, 1, 60, 2, 3);
    b = run_loader(d, &c, B, seed, 50, 60, 3, 1);
    real *r2 = run_loader(d, &c, B, seed, 55, 60, 1, 2);
    check(a && b && r2 && !memcmp(a + per * 49, b, sizeof(real) * per * 11) && !memcmp(a + per * 54, r2, sizeof(real) * per * 6),
          "loader_resume", "started at 50 and at 55: the batches of the run started at 1, bit for bit");
    free(a), free(b), free(r2);
    a = run_loader(d, &c, B, seed + 1, 1, 3, 1, 1);
    b = run_loader(d, &c, B, seed, 1, 3, 1, 1);
    check(a && b && memcmp(a, b, sizeof(real) * per * 3), "loader_seed_matters", "seeds %llu and %llu differ",
          (unsigned long long)seed, (unsigned long long)seed + 1);
    free(a), free(b);

    // extrapolate's plan, with negative offsets: every slot shows frame t0 + offset of one clip
    static const char *plans[] = {
        "anchor:-16 context:-8 context:-4 context:0 target:4 target:8 target:12",
        "anchor:0 context:8 context:12 context:16 target:20 target:24 target:28",
    };
    for (int pi = 0; pi < 2; pi++) {
        Config e = plan_config(N, plans[pi]);
        const int steps = 100, EB = 8;
        size_t eper = (size_t)EB * e.slots * 3 * N * N;
        real *x = run_loader(d, &e, EB, seed, 1, steps, 2, 2);
        int lo = (int)e.slot_offset[0], hi = (int)e.slot_offset[e.slots - 1];
        int windows = 0, honoured = 0, flips = 0, tagged = 0, tmin = 1 << 30, tmax = -1, seen[16] = {0};
        for (int s = 0; x && s < steps; s++)
            for (int w = 0; w < EB; w++, windows++) {
                const real *win = x + eper * s + (size_t)w * e.slots * 3 * N * N;
                int G = (int)lrint((win[(size_t)N * N] + 1) * 127.5);  // slot 0, green, pixel (0, 0)
                if (G < 16) seen[G] = 1;
                int ok = 1, t0 = 0, flipped = 0;
                for (int f = 0; f < e.slots && ok; f++) {
                    const real *fr = win + (size_t)f * 3 * N * N;
                    int R = (int)lrint((fr[0] + 1) * 127.5), g = (int)lrint((fr[(size_t)N * N] + 1) * 127.5);
                    int Bl0 = (int)lrint((fr[2 * (size_t)N * N] + 1) * 127.5);
                    if (f == 0) t0 = R - (int)e.slot_offset[0], flipped = Bl0 == 255;
                    ok = g == G && R == t0 + (int)e.slot_offset[f] && R >= 0 && R < F && (Bl0 == 255) == flipped;
                }
                tagged++;
                honoured += ok;
                flips += flipped;
                if (t0 < tmin) tmin = t0;
                if (t0 > tmax) tmax = t0;
            }
        int all_clips = 1;
        for (int k = 0; k < 10; k++) all_clips &= seen[k];
        double frac = tagged ? (double)flips / tagged : 0;
        char label[64];
        snprintf(label, sizeof label, "loader_plan_offsets_%s", pi ? "positive" : "negative");
        check(x && honoured == tagged && tagged > 0 && tmin == -lo && tmax == F - 1 - hi && all_clips, label,
              "%s: %d of %d tagged windows show frames t0 + offset of one clip; t0 in %d..%d (all of %d..%d); all 10 "
              "clips drawn",
              plans[pi], honoured, tagged, tmin, tmax, -lo, F - 1 - hi);
        if (pi == 0)
            check(x && fabs(frac - 0.5) < 0.08, "loader_flips_half", "%d of %d windows mirrored (%.3f)", flips, tagged,
                  frac);
        free(x);
    }

    // refusals at loader_start
    {
        Config e = plan_config(N, "anchor:-20 context:0 target:12");
        Loader *l = loader_start(NULL, d, &e, 2, 1, 1, 1, 1, err, sizeof err);
        check(!l && one_line(err) && strstr(err, "spans 33 frames") && strstr(err, "clip_frames 32"), "loader_plan_too_long",
              "%s", err);
        loader_stop(l);
        e = plan_config(N, "anchor:0 target:1.5");
        l = loader_start(NULL, d, &e, 2, 1, 1, 1, 1, err, sizeof err);
        check(!l && one_line(err) && strstr(err, "whole number"), "loader_fractional_offset", "%s", err);
        loader_stop(l);
        e = plan_config(16, "anchor:0 target:1");
        l = loader_start(NULL, d, &e, 2, 1, 1, 1, 1, err, sizeof err);
        check(!l && one_line(err) && strstr(err, "frame_size 16"), "loader_frame_size_mismatch", "%s", err);
        loader_stop(l);
        // steps come one after another
        l = loader_start(NULL, d, &c, 2, 1, 5, 2, 2, err, sizeof err);
        double wait = -1;
        const real *x5 = l ? loader_get(l, 5, &wait, err, sizeof err) : NULL;
        const real *x7 = l ? loader_get(l, 7, NULL, err, sizeof err) : NULL;
        check(x5 && wait >= 0 && !x7 && strstr(err, "step 7") && strstr(err, "next one is 6"), "loader_steps_in_order",
              "%s (the first wait: %.3f ms)", err, 1e3 * wait);
        loader_stop(l);
    }
    dataset_close(d);

    // a shard that goes bad after opening: loader_get fails with the reader's line
    {
        char bad[512];
        folder(bad, sizeof bad, "loader_bad");
        if (make_dataset(bad, N, F, "rrrr", 0, NULL, NULL, err, sizeof err)) return;
        Dataset *bd = dataset_open(bad, err, sizeof err);
        for (int i = 0; bd && i < dataset_clips(bd); i++) {
            ClipLocation loc;
            char path[700];
            dataset_clip_location(bd, i, &loc);
            snprintf(path, sizeof path, "%s/%s", bad, loc.shard);
            flip_byte(path, (long)(loc.offset + 5));
        }
        Loader *l = bd ? loader_start(NULL, bd, &c, 4, 1, 1, 2, 2, err, sizeof err) : NULL;
        const real *x = l ? loader_get(l, 1, NULL, err, sizeof err) : NULL;
        check(l && !x && one_line(err) && strstr(err, "CRC32 mismatch") && strstr(err, "shard-00000.safetensors"),
              "loader_bad_shard", "%s", err);
        loader_stop(l);
        dataset_close(bd);
    }
}

// windows per second from a dataset of 64x64 clips, 7 slots, batch 8
static void bench(const char *what, const char *kinds) {
    const int N = 64, F = 32, B = 8;
    char dir[512], err[1024];
    folder(dir, sizeof dir, what);
    double t0 = now_s();
    if (make_dataset(dir, N, F, kinds, 0, NULL, NULL, err, sizeof err)) {
        check(0, "loader_throughput", "%s", err);
        return;
    }
    double t_write = now_s() - t0;
    Dataset *d = dataset_open(dir, err, sizeof err);
    Config c = plan_config(N, "anchor:0 target:1 target:2 target:3 target:4 target:5 target:6");
    ClipLocation loc;
    dataset_clip_location(d, 0, &loc);
    double rate[2] = {0, 0}, waited[2] = {0, 0};
    for (int th = 1; th <= 2; th++) {
        Loader *l = loader_start(NULL, d, &c, B, 7, 1, th, 4, err, sizeof err);
        double start = now_s(), wait_total = 0;
        int steps = 0;
        while (now_s() - start < 0.4) {
            double wait;
            if (!loader_get(l, steps + 1, &wait, err, sizeof err)) break;
            wait_total += wait;
            steps++;
        }
        double dt = now_s() - start;
        loader_stop(l);
        rate[th - 1] = steps * B / dt, waited[th - 1] = wait_total / dt;
    }
    char label[64];
    snprintf(label, sizeof label, "loader_throughput_%s", what);
    check(rate[0] > 0 && rate[1] > 0, label,
          "%d clips of %dx%dx%d (%s, %llu of %zu bytes stored; written in %.2f s): %.0f windows/s with 1 thread, %.0f "
          "with 2 (7 slots, batch %d)",
          (int)strlen(kinds), F, N, N, loc.zlib ? "zlib" : "raw", (unsigned long long)loc.stored, dataset_clip_bytes(d),
          t_write, rate[0], rate[1], B);
    (void)waited;
    dataset_close(d);
    rm_rf(dir);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/fc_test_shards_XXXXXX");
    if (!mkdtemp(g_root)) {
        perror("mkdtemp");
        return 1;
    }
    double t0 = now_s();
    test_roundtrip();
    test_read_header();
    test_crash_safety();
    test_corruption();
    test_loader();
    bench("zlib", "ssssssssssssssssssss");
    bench("raw", "rrrrrrrrrrrrrrrrrrrr");
    rm_rf(g_root);
    printf("test_shards: %.1f s, %d failed\n", now_s() - t0, g_failed);
    return g_failed != 0;
}
