// test_shards.c: the clip dataset (shards.c): a round trip across several shards, header-only reads,
// a frame rate that needs 17 digits and the writer's value ranges, and hand-made shards the writer
// never makes (bad CRC text, key, rate or zlib stream). Damage (kill -9 mid-write, corrupt files):
// test_shard_damage.c; the loader over such datasets: test_loader.c.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "base/common.h"
#include "formats/safetensors.h"
#include "formats/shard_fixture.h"
#include "formats/shards.h"

// The bytes this process has read through read(2) and its kin (/proc/self/io's rchar), or -1.
static long long bytes_read_by_process(void) {
    FILE *f = fopen("/proc/self/io", "r");
    long long n = -1;
    if (f) {
        if (fscanf(f, "rchar: %lld", &n) != 1) n = -1;
        fclose(f);
    }
    return n;
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
    // where each clip came from, read back from its shard's header (what inspect names a damaged clip by)
    int origins = 0;
    for (int i = 0; i < n; i++) {
        char src[128];
        long first = -2;
        origins += !dataset_clip_origin(d, i, src, sizeof src, &first, err, sizeof err) &&
                   !strcmp(src, meta[i].source) && first == meta[i].first;
    }
    check(origins == n, "shards_clip_origin", "%d of %d clips: source and first frame as written", origins, n);
    // the same through a reader that keeps the last shard's header (inspect's report of many bad clips
    // of one shard): each header read once, counted in bytes read (the kernel's count), not in time
    {
        long long header_bytes = 0;
        for (int s = 0; s < dataset_shards(d); s++) {
            char path[600];
            StFile f;
            snprintf(path, sizeof path, "%s/shard-%05d.safetensors", dir, s);
            if (!st_read_header(path, &f, err, sizeof err)) header_bytes += (long long)f.data_start, st_free(&f);
        }
        ClipOriginReader *reader = clip_origin_reader(d);
        long long r0 = bytes_read_by_process();
        int same_origins = 0;
        for (int i = 0; i < n; i++) {
            char src[128];
            long first = -2;
            same_origins += !clip_origin_read(reader, i, src, sizeof src, &first, err, sizeof err) &&
                            !strcmp(src, meta[i].source) && first == meta[i].first;
        }
        long long nread = bytes_read_by_process() - r0;
        char src[128];
        long first = 0;
        int past_end = clip_origin_read(reader, n, src, sizeof src, &first, err, sizeof err);
        clip_origin_reader_free(reader);
        // (the shards hold two clips each: a header read a clip is twice the bytes; the slack is for the
        // count's own read of /proc/self/io)
        check(same_origins == n && r0 >= 0 && nread < header_bytes * 3 / 2 && past_end == -1 && one_line(err),
              "shards_clip_origin_reader_reads_each_header_once",
              "%d of %d clips as written; %lld bytes read for headers of %lld bytes in all (%d shards); past the "
              "end: %s", same_origins, n, nread, header_bytes, dataset_shards(d), err);
    }
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
            // header_crc32: the CRC-32 of the shard's first 8 + header length bytes
            size_t slen;
            uint8_t *sbytes = test_read_file(spath, &slen);
            uint64_t hlen = 0;
            for (int b = 7; sbytes && slen >= 8 && b >= 0; b--) hlen = hlen << 8 | sbytes[b];
            unsigned long hcrc = sbytes && 8 + hlen <= slen ? crc32_z(0L, sbytes, (size_t)(8 + hlen)) : 0;
            free(sbytes);
            snprintf(want, sizeof want, "{\"file\": \"%s\", \"clips\": %d, \"bytes\": %ld, \"header_crc32\": \"%08lx\"}",
                     name, clips_in, file_size(spath), hcrc);
            found += strstr(text, want) != NULL;
        }
        snprintf(want, sizeof want,
                 "{\"format\": \"framechain-dataset\", \"format_version\": 1, \"frame_size\": %d, \"clip_frames\": %d, "
                 "\"clips\": %d,",
                 N, F, n);
        int head = strncmp(text, want, strlen(want)) == 0;
        check(head && found == ns, "shards_dataset_json", "totals %s, %d of %d shard entries match their files (size, header CRC)",
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
                 !shard_writer_add(w, c, "caf\xe9.mp4", 5, 12.5, err, sizeof err) &&
                 !shard_writer_finish(w, err, sizeof err);
        size_t len;
        char path[600];
        snprintf(path, sizeof path, "%s/manifest.tsv", dir2);
        char *text = ok ? (char *)test_read_file(path, &len) : NULL;
        snprintf(path, sizeof path, "%s/shard-00000.safetensors", dir2);
        StFile f;
        int st = ok && !st_read(path, &f, err, sizeof err);
        const char *s0 = st ? st_meta(&f, "clip.0.source") : NULL, *s1 = st ? st_meta(&f, "clip.1.source") : NULL;
        check(text && strstr(text, "a\\tb\\nc\\\\d.mp4\t0\t2\t30\n") &&
                  strstr(text, "caf\xef\xbf\xbd.mp4\t5\t2\t12.5\n") &&
                  s0 && !strcmp(s0, "a\tb\nc\\d.mp4") && s1 && !strcmp(s1, "caf\xef\xbf\xbd.mp4"),
              "shards_odd_sources", "%s",
              ok ? "tab, newline, backslash escaped in the manifest; invalid UTF-8 as U+FFFD" : err);
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
    int same = ra == 0 && rb == 0 && a.n == b.n && a.nmeta == b.nmeta && a.size == b.size &&
               a.data_start == b.data_start;
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
    int ok = fd >= 0 && write(fd, head, 8 + hn) == (ssize_t)(8 + hn) &&
             !ftruncate(fd, (off_t)(8 + hn) + ((off_t)1 << 32));
    if (fd >= 0) close(fd);
    // Counted in bytes the process read (the kernel's count), not in time: a loaded machine cannot fail it.
    long long r0 = bytes_read_by_process();
    rc = ok ? st_read_header(big, &a, err, sizeof err) : -1;
    long long nread = bytes_read_by_process() - r0;
    check(rc == 0 && a.size == 8 + hn + ((size_t)1 << 32) && r0 >= 0 && nread < (1 << 20),
          "st_read_header_reads_only_the_header", "%s: %zu bytes, %lld of them read", rc ? err : "accepted",
          rc ? 0 : a.size, nread);
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

// A rate that needs all 17 significant digits (NTSC's 30000/1001) is written so that it reads back as
// the same double, in the shard's metadata and in manifest.tsv; rates and first frames beyond what the
// reader takes are refused by the writer.
static void test_writer_values(void) {
    const int N = 4, F = 2;
    size_t raw = (size_t)F * N * N * 3;
    char dir[512], err[1024], path[600];
    folder(dir, sizeof dir, "fps_text");
    uint8_t *c = fc_calloc(raw, 1);
    const double fps = 30000.0 / 1001;
    ShardWriter *w = shard_writer_open(dir, N, F, 0, err, sizeof err);
    int rc = w ? shard_writer_add(w, c, "ntsc.mp4", 0, fps, err, sizeof err) : -1;
    if (w && !rc) rc = shard_writer_finish(w, err, sizeof err);
    else shard_writer_abort(w);
    StFile f;
    snprintf(path, sizeof path, "%s/shard-00000.safetensors", dir);
    if (!rc) rc = st_read_header(path, &f, err, sizeof err);
    const char *meta = rc ? NULL : st_meta(&f, "clip.0.fps");
    snprintf(path, sizeof path, "%s/manifest.tsv", dir);
    size_t len;
    char *manifest = rc ? NULL : (char *)test_read_file(path, &len);
    const char *tab = manifest ? strrchr(manifest, '\t') : NULL;  // the last column: fps
    check(meta && strtod(meta, NULL) == fps && tab && strtod(tab + 1, NULL) == fps, "shards_fps_exact",
          "30000/1001 written as '%s' in the shard and '%.*s' in manifest.tsv", meta ? meta : err,
          tab ? (int)strcspn(tab + 1, "\n") : 0, tab ? tab + 1 : "");
    if (!rc) st_free(&f);
    free(manifest);

    // values the reader would refuse are refused by shard_writer_add (the dataset stays readable); the
    // largest ones it reads are accepted
    folder(dir, sizeof dir, "clip_values");
    w = shard_writer_open(dir, N, F, 0, err, sizeof err);
    char why[3][1024] = {"", "", ""};
    int fps_refused = w && shard_writer_add(w, c, "fast.mp4", 0, 2e6, why[0], sizeof why[0]) == -1 &&
                      strstr(why[0], "not in [0, 1e6]");
    int first_refused = w && shard_writer_add(w, c, "long.mp4", (long)(((uint64_t)1 << 62) + 1), 25, why[1],
                                              sizeof why[1]) == -1 && strstr(why[1], "out of range");
    int edges_taken = w && !shard_writer_add(w, c, "edge.mp4", (long)((uint64_t)1 << 62), 1e6, why[2], sizeof why[2]);
    rc = w ? shard_writer_finish(w, err, sizeof err) : -1;
    Dataset *d = rc ? NULL : dataset_open(dir, err, sizeof err);
    check(fps_refused && first_refused && edges_taken && d && dataset_clips(d) == 1, "shards_writer_value_ranges",
          "fps 2e6: %s; first frame 2^62+1: %s; fps 1e6 at first frame 2^62: %s; the dataset: %s", why[0], why[1],
          edges_taken ? "written" : why[2], d ? "opens with its 1 clip" : err);
    dataset_close(d);
    free(c);
}

// ---- shards made by hand ----

// One clip of a hand-made shard: its key (the tensor's name and its metadata's prefix), its encoding and
// CRC text, and the bytes stored (1-D when zlib, else (F, N, N, 3)). The writer never makes the bad ones.
typedef struct {
    const char *key, *encoding, *crc;
    const uint8_t *data;
    size_t stored;
    const char *fps;  // NULL: 25
} HandClip;

// shard_check_bytes on a shard of the one clip c, of F frames of NxN: 0, or -1 with err filled.
static int check_hand_shard(int N, int F, const HandClip *c, char *err, size_t errlen) {
    char path[600], keys[5][64], Ns[16], Fs[16];
    static const char *const fields[5] = {"encoding", "crc32", "source", "first_frame", "fps"};
    snprintf(path, sizeof path, "%s/hand.safetensors", g_root);
    snprintf(Ns, sizeof Ns, "%d", N);
    snprintf(Fs, sizeof Fs, "%d", F);
    for (int j = 0; j < 5; j++) snprintf(keys[j], sizeof keys[j], "%s.%s", c->key, fields[j]);
    StMeta m[] = {{"format", "framechain-shard"}, {"format_version", "1"}, {"frame_size", Ns},
                  {"clip_frames", Fs}, {"clips", "1"}, {keys[0], c->encoding}, {keys[1], c->crc},
                  {keys[2], "hand.mp4"}, {keys[3], "0"}, {keys[4], c->fps ? c->fps : "25"}};
    StTensor t = {c->key, "U8", 4, {F, N, N, 3}, c->data};
    if (!strcmp(c->encoding, "zlib")) t.ndim = 1, t.shape[0] = (long)c->stored;
    if (st_write(path, &t, 1, m, 10, err, errlen)) return -1;
    size_t len;
    uint8_t *bytes = test_read_file(path, &len);
    int rc = shard_check_bytes(bytes, len, err, errlen);
    free(bytes);
    unlink(path);
    return rc;
}

// Shards whose header or clip bytes are wrong in ways the writer never makes: each refused, with the
// reason; the same shard with the right values is accepted.
static void test_hand_made_shards(void) {
    const int N = 8, F = 4;
    size_t raw = (size_t)F * N * N * 3, big = raw + 64;
    uint8_t *clip = fc_calloc(big, 1), *z = fc_malloc(compressBound((uLong)big) + 8);
    clip_random(clip, raw / 2, 5);  // half random, half zeros: zlib shrinks it, but not to nothing
    char crc[16], crc9[16], bigcrc[16], err[1024];
    snprintf(crc, sizeof crc, "%08x", (unsigned)crc32_z(0, clip, raw));
    snprintf(crc9, sizeof crc9, "%s0", crc);
    snprintf(bigcrc, sizeof bigcrc, "%08x", (unsigned)crc32_z(0, clip, big));

    HandClip good = {"clip.0", "raw", crc, clip, raw};
    int rc = check_hand_shard(N, F, &good, err, sizeof err);
    check(rc == 0, "shard_hand_made_raw_accepted", "%s", rc ? err : "one raw clip, its CRC right");
    HandClip c = good;
    c.crc = crc9;  // the right 8 digits and one more
    rc = check_hand_shard(N, F, &c, err, sizeof err);
    check(rc == -1 && one_line(err) && strstr(err, "not 8 lowercase hex digits"), "shard_hand_made_crc_of_9_digits",
          "CRC '%s': %s", crc9, rc ? err : "accepted");
    c = good;
    c.fps = "2000000";  // beyond the 1e6 a writer takes
    rc = check_hand_shard(N, F, &c, err, sizeof err);
    check(rc == -1 && one_line(err) && strstr(err, "not a number in [0, 1e6]"), "shard_hand_made_fps_too_high", "%s",
          rc ? err : "accepted");
    c = good;
    c.key = "clip.00";  // clip 0 under a name with a leading zero
    rc = check_hand_shard(N, F, &c, err, sizeof err);
    check(rc == -1 && one_line(err) && strstr(err, "clip.00"), "shard_hand_made_leading_zero_key", "%s",
          rc ? err : "accepted");

    uLongf zlen = compressBound((uLong)raw);
    compress2(z, &zlen, clip, (uLong)raw, 1);
    c = (HandClip){"clip.0", "zlib", crc, z, zlen};
    rc = check_hand_shard(N, F, &c, err, sizeof err);
    check(rc == 0 && zlen < raw, "shard_hand_made_zlib_accepted", "%s",
          rc ? err : "one zlib clip, its stream and CRC right");
    memset(z + zlen, 0, 3);  // three bytes after the end of the stream
    c.stored = zlen + 3;
    rc = check_hand_shard(N, F, &c, err, sizeof err);
    check(rc == -1 && one_line(err) && strstr(err, "3 bytes follow the end of the zlib stream"),
          "shard_hand_made_bytes_after_zlib_end", "%s", rc ? err : "accepted");
    zlen = compressBound((uLong)big);
    compress2(z, &zlen, clip, (uLong)big, 1);  // a stream of 64 bytes more than a clip, the CRC of them all
    c = (HandClip){"clip.0", "zlib", bigcrc, z, zlen};
    rc = check_hand_shard(N, F, &c, err, sizeof err);
    check(rc == -1 && one_line(err) && strstr(err, "inflates to more than"), "shard_hand_made_zlib_too_long", "%s",
          rc ? err : "accepted");
    // a stream cut short (its last 6 bytes gone): refused, and soon (the alarm ends a reader that spins)
    zlen = compressBound((uLong)raw);
    compress2(z, &zlen, clip, (uLong)raw, 1);
    c = (HandClip){"clip.0", "zlib", crc, z, zlen - 6};
    alarm(10);
    rc = check_hand_shard(N, F, &c, err, sizeof err);
    alarm(0);
    check(rc == -1 && one_line(err) && (strstr(err, "cut short") || strstr(err, "corrupt zlib")),
          "shard_hand_made_zlib_cut_short", "%s", rc ? err : "accepted");
    // a zlib tensor as large as the raw clip: refused by the header check, before any inflating
    zlen = compressBound((uLong)raw);
    compress2(z, &zlen, clip, (uLong)raw, 1);
    memset(z + zlen, 0, raw - zlen);
    c = (HandClip){"clip.0", "zlib", crc, z, raw};
    rc = check_hand_shard(N, F, &c, err, sizeof err);
    check(rc == -1 && one_line(err) && strstr(err, "a 1-D tensor of 1 to"), "shard_hand_made_zlib_as_large_as_raw",
          "%s", rc ? err : "accepted");
    free(clip), free(z);
}

static void run_all(void) {
    test_roundtrip();
    test_read_header();
    test_hand_made_shards();
    test_writer_values();
}

int main(void) { return run_in_scratch("shards", run_all); }
