// test_latent_data.c: latent datasets (prepare --vae; formats/shards.h): F16 conversion, SHA-256 (its
// padding at the block boundaries too), the autoencoder's identity as text and back, the latent shard
// and dataset.json written and read back (frames outside a clip refused), a damaged frame found alone
// by its CRC, a shard whose CRC text is too long, the refusals of a dataset.json that mixes the two
// kinds or holds a bad autoencoder, and the loader's windows over latents.
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "base/common.h"
#include "base/config.h"
#include "base/half.h"
#include "base/sha256.h"
#include "dataset/latents.h"
#include "dataset/loader.h"
#include "formats/safetensors.h"
#include "formats/shard_fixture.h"
#include "formats/shards.h"

// ---- F16 ----

static void test_half(void) {
    int exact = 0, finite = 0, nan_ok = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float v = half_to_float((uint16_t)h);
        if (isnan(v)) {
            nan_ok &= isnan(half_to_float(half_from_float(v)));
            continue;
        }
        finite++;
        exact += half_from_float(v) == h;
    }
    check(exact == finite && nan_ok, "half_round_trip", "%d of %d F16 values (infinities and subnormals included) "
          "come back bit for bit through float; NaN stays NaN", exact, finite);
    // rounding: the nearest F16 of random floats over the whole range, ties to the even one
    int nearest = 0, n = 200000;
    for (int i = 0; i < n; i++) {
        uint32_t u = philox_u32(3, 0, RNG_TEST, (uint64_t)i);
        float v = ldexpf((float)(u & 0xFFFFFF) / 16777216.0f + 0.5f, (int)(u >> 24) % 48 - 30) * (u & 1 ? -1 : 1);
        if (i % 7 == 0) {  // an exact tie between two neighbours: the mean of two consecutive F16s
            uint16_t a = (uint16_t)(u >> 16 & 0x7BFE);
            v = (float)(((double)half_to_float(a) + half_to_float((uint16_t)(a + 1))) / 2);
        }
        uint16_t h = half_from_float(v);
        double got = fabs((double)half_to_float(h) - v), best = got;
        int tie_even = 1;
        for (int d = -1; d <= 1; d += 2) {
            uint16_t o = (uint16_t)(h + d);
            if ((o & 0x7C00) == 0x7C00 || ((o ^ h) & 0x8000)) continue;
            double e = fabs((double)half_to_float(o) - v);
            if (e < best) best = e;
            if (e == got && (h & 1)) tie_even = 0;
        }
        if (fabsf(v) >= 65520) nearest += (h & 0x7FFF) == 0x7C00;
        else nearest += got == best && tie_even;
    }
    check(nearest == n, "half_nearest_even", "%d of %d random floats (every 7th an exact tie) go to the nearest F16, "
          "ties to the even one", nearest, n);
    check(half_from_float(65519.0f) == 0x7BFF && half_from_float(65520.0f) == 0x7C00 &&
              half_from_float(-1e-8f) == 0x8000 && half_from_float(5.9604645e-8f) == 0x0001,
          "half_edges", "65519 -> 65504, 65520 -> infinity, -1e-8 -> -0, 2^-24 -> the smallest subnormal");
}

// ---- SHA-256 ----

static void test_sha256(void) {
    static const struct {
        const char *text;
        long repeat;
        const char *hex;
    } cases[] = {  // FIPS 180-2's examples
        {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    };
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        Sha256 s;
        sha256_init(&s);
        size_t len = strlen(cases[i].text);
        if (cases[i].repeat > 1) {  // fed in uneven pieces: 1, 2, ..., 127 bytes at a time
            char *buf = fc_malloc(128);
            memset(buf, 'a', 128);
            long left = cases[i].repeat;
            for (long k = 1; left > 0; k = k % 127 + 1) {
                long take = k < left ? k : left;
                sha256_update(&s, buf, (size_t)take);
                left -= take;
            }
            free(buf);
        } else {
            sha256_update(&s, cases[i].text, len);
        }
        char hex[65];
        sha256_hex(&s, hex);
        if (!strcmp(hex, cases[i].hex)) ok++;
        else printf("  case %d: %s\n", i, hex);
    }
    check(ok == 4, "sha256_vectors", "%d of 4 FIPS 180-2 examples (the million 'a' fed in pieces of 1 to 127 bytes)",
          ok);
    // The lengths where the padding changes shape: 55 bytes is the longest message whose length still fits
    // in its last block, 56 to 63 need one more; 64 and 119 besides. Digests from Python's hashlib.
    static const struct {
        int n;
        const char *hex;
    } pads[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
    };
    char a[128], got[5][65];
    memset(a, 'a', sizeof a);
    ok = 0;
    for (int i = 0; i < 4; i++) {
        Sha256 s;
        sha256_init(&s);
        sha256_update(&s, a, (size_t)pads[i].n);
        sha256_hex(&s, got[i]);
        ok += !strcmp(got[i], pads[i].hex);
    }
    check(ok == 4, "sha256_padding_lengths", "%d of 4 runs of 'a' (55, 63, 64, 119 bytes) give hashlib's digest; "
          "55: %.16s...", ok, got[0]);
    // a file's digest; a FIFO (a --vae named wrongly) refused at once, not waited on for a writer (the
    // alarm ends the test where it blocks)
    char dir[] = "/tmp/fc_sha_XXXXXX", path[64], fifo[64], hex[65], err[512] = "";
    int made = mkdtemp(dir) != NULL;
    snprintf(path, sizeof path, "%s/abc", dir), snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    FILE *f = made ? fopen(path, "wb") : NULL;
    if (f) fputs("abc", f), fclose(f);
    int file_ok = f && !sha256_file(path, hex, err, sizeof err) && !strcmp(hex, cases[1].hex);
    check(file_ok, "sha256_file", "the file 'abc': %s", file_ok ? "its digest" : err);
    alarm(10);
    int refused = made && !mkfifo(fifo, 0600) && sha256_file(fifo, hex, err, sizeof err) && strstr(err, "FIFO");
    alarm(0);
    check(refused, "sha256_file_fifo_refused", "%s", err);
    unlink(path), unlink(fifo), rmdir(dir);
}

// ---- the latent dataset ----

enum { LF = 6, LC = 4, LN = 4, LCLIPS = 5 };
#define UNIT ((size_t)LC * LN * LN)      // values of a (C, n, n) unit
#define CLIP_VALUES ((size_t)LF * 2 * UNIT)

static const LatentIdentity ID = {"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", "AutoencoderKL",
                                  LC, 8, 8 * LN, 0.18215, -0.5};

// Clip i's F16 values: random finite ones.
static void latent_clip(uint16_t *v, int i) {
    for (size_t e = 0; e < CLIP_VALUES; e++) {
        uint32_t u = philox_u32(11, (uint32_t)i, RNG_TEST, e);
        v[e] = half_from_float((float)((int)(u % 20001) - 10000) / 2000.0f);
    }
}

// poison: clip 1's frame 4 holds an inf at value 7, clip 3's frame 0 mirrored a NaN at value 0 (the
// CRCs theirs: a shard another tool wrote).
static int make_latent_dataset(const char *dir, uint16_t *all, int poison, char *err, size_t errlen) {
    ShardWriter *w = shard_writer_open_latents(dir, &ID, LN, LF, CLIP_VALUES * 2 * 2 + 10, err, errlen);
    if (!w) return -1;
    for (int i = 0; i < LCLIPS; i++) {
        latent_clip(all + CLIP_VALUES * i, i);
        if (poison && i == 1) all[CLIP_VALUES * i + 2 * 4 * UNIT + 7] = 0x7C00;
        if (poison && i == 3) all[CLIP_VALUES * i + 1 * UNIT] = 0xFE00;
        if (shard_writer_add(w, (const uint8_t *)(all + CLIP_VALUES * i), "in.mp4", 32L * i, 25, err, errlen)) {
            shard_writer_abort(w);
            return -1;
        }
    }
    return shard_writer_finish(w, err, errlen);
}

// Whether out (n units) holds frames[] of clip i, mirrored or not.
static int units_are(const float *out, const uint16_t *all, int i, int n, const int *frames, int mirror) {
    for (int k = 0; k < n; k++)
        for (size_t e = 0; e < UNIT; e++)
            if (out[k * UNIT + e] != half_to_float(all[CLIP_VALUES * i + (2 * (size_t)frames[k] + mirror) * UNIT + e]))
                return 0;
    return 1;
}

static void test_latent_roundtrip(const char *dir, const uint16_t *all) {
    char err[1024];
    Dataset *d = dataset_open(dir, err, sizeof err);
    check(d != NULL, "latent_open", "%s", d ? "dataset.json (format_version 2) and every latent shard accepted" : err);
    if (!d) return;
    const LatentIdentity *id = dataset_latent(d);
    check(id && dataset_channels(d) == LC && dataset_frame_size(d) == LN && dataset_clips(d) == LCLIPS &&
              dataset_shards(d) >= 2 && dataset_clip_bytes(d) == CLIP_VALUES * 2,
          "latent_open_sizes", "%d channels, side %d, %d clips in %d shards, %zu bytes a clip", dataset_channels(d),
          dataset_frame_size(d), dataset_clips(d), dataset_shards(d), dataset_clip_bytes(d));
    check(id && !strcmp(id->sha256, ID.sha256) && !strcmp(id->family, ID.family) && id->channels == LC &&
              id->factor == 8 && id->image_size == 8 * LN && id->scale == ID.scale && id->shift == ID.shift,
          "latent_identity", "sha256, family, channels, factor, image size, scale %.17g and shift %g as written",
          id ? id->scale : 0, id ? id->shift : 0);
    float *out = fc_malloc(sizeof(float) * 3 * UNIT);
    int frames[3] = {5, 0, 3}, good = 0;
    for (int i = 0; i < LCLIPS; i++)
        for (int m = 0; m < 2; m++)
            good += !dataset_read_latent_frames(d, i, 3, frames, m, out, err, sizeof err) &&
                    units_are(out, all, i, 3, frames, m);
    check(good == 2 * LCLIPS, "latent_read_frames", "%d of %d reads of frames 5, 0, 3 (as they are and mirrored) "
          "give the stored values", good, 2 * LCLIPS);
    // frames outside the clip: refused by number (frame LF would read the next clip's bytes)
    int outside[2] = {LF, -1}, refused = 0;
    char why[2][1024] = {"", ""};
    for (int k = 0; k < 2; k++)
        refused += dataset_read_latent_frames(d, 0, 1, &outside[k], 0, out, why[k], sizeof why[k]) == -1 &&
                   one_line(why[k]) && strstr(why[k], "does not exist") != NULL;
    check(refused == 2, "latent_read_frames_outside", "frames %d and -1 of clips of %d: %s; %s", LF, LF, why[0],
          why[1]);
    uint8_t *raw = fc_malloc(dataset_clip_bytes(d));
    int same = 0;
    for (int i = 0; i < LCLIPS; i++)
        same += !dataset_read_clip(d, i, raw, err, sizeof err) && !memcmp(raw, all + CLIP_VALUES * i, CLIP_VALUES * 2);
    check(same == LCLIPS, "latent_read_clip", "%d of %d whole clips byte-exact", same, LCLIPS);
    free(raw), free(out);
    dataset_close(d);
}

// The identity a checkpoint records (latent_identity_text) reads back as itself; that text with more
// after it, or with its digest cut short, is refused.
static void test_identity_text(void) {
    char text[512], longer[600], cut[512];
    LatentIdentity back;
    latent_identity_text(&ID, text, sizeof text);
    int same = !latent_identity_parse(text, &back) && !strcmp(back.family, ID.family) &&
               back.channels == ID.channels && back.factor == ID.factor && back.image_size == ID.image_size &&
               back.scale == ID.scale && back.shift == ID.shift && !strcmp(back.sha256, ID.sha256);
    snprintf(longer, sizeof longer, "%s, extra", text);
    snprintf(cut, sizeof cut, "%.*s", (int)strlen(text) - 1, text);
    int longer_refused = latent_identity_parse(longer, &back) == -1, cut_refused = latent_identity_parse(cut, &back) == -1;
    check(same && longer_refused && cut_refused, "latent_identity_text_round_trip",
          "'%s' reads back field for field: %s; with ', extra' after it refused: %s; one digit short refused: %s",
          text, same ? "yes" : "no", longer_refused ? "yes" : "no", cut_refused ? "yes" : "no");
}

// The scaling in the fewest digits that read back as itself (0.18215, where %.17g wrote
// 0.18215000000000001), and a line of a build that wrote 17 digits names the same latents as today's:
// models trained by both go on one chain. Another scale or digest does not.
static void test_identity_same(void) {
    char text[512], old[512], other[512], digest[512];
    LatentIdentity third = ID, moved = ID;
    third.scale = 1.0 / 3.0;
    moved.sha256[0] = 'f';
    latent_identity_text(&ID, text, sizeof text);
    snprintf(old, sizeof old, "%s, %d channels, %dx, frames of %d, scale %.17g, shift %.17g, sha256 %s", ID.family,
             ID.channels, ID.factor, ID.image_size, ID.scale, ID.shift, ID.sha256);
    int short_form = strstr(text, ", scale 0.18215, shift -0.5, ") != NULL;
    check(short_form && latent_identity_same(text, old) && latent_identity_same("", ""), "latent_identity_short_scale",
          "'%s' (the scale in its shortest form: %s) names the same latents as '%s'", text, short_form ? "yes" : "no",
          old);
    latent_identity_text(&third, other, sizeof other);
    latent_identity_text(&moved, digest, sizeof digest);
    LatentIdentity back;
    int third_back = !latent_identity_parse(other, &back) && back.scale == third.scale;
    check(third_back && !latent_identity_same(text, other) && !latent_identity_same(text, digest) &&
              !latent_identity_same(text, ""),
          "latent_identity_same_tells_apart", "scale 1/3 as '%s' reads back exactly: %s; it, another digest and "
          "frames all differ from '%s'", other, third_back ? "yes" : "no", text);
}

// A latent shard written again with clip 0's frame_crc32 given one CRC more than its 2F: refused by the
// shard check, which counts the characters.
static void test_latent_crc_text(const char *dir) {
    char path[600], copy[600], err[1024];
    snprintf(path, sizeof path, "%s/shard-00000.safetensors", dir);
    snprintf(copy, sizeof copy, "%s/../long_crcs.safetensors", dir);
    StFile f;
    if (st_read(path, &f, err, sizeof err)) {
        check(0, "latent_crc_text_setup", "%s", err);
        return;
    }
    StTensor *t = fc_calloc((size_t)f.n, sizeof *t);
    for (int i = 0; i < f.n; i++) {
        const StEntry *e = &f.entries[i];
        t[i] = (StTensor){e->name, e->dtype, e->ndim, {0}, st_data(&f, e)};
        memcpy(t[i].shape, e->shape, sizeof e->shape);
    }
    StMeta *m = fc_calloc((size_t)f.nmeta, sizeof *m);
    char *longer = NULL;
    for (int i = 0; i < f.nmeta; i++) {
        m[i] = (StMeta){f.meta_keys[i], f.meta_values[i]};
        if (!strcmp(f.meta_keys[i], "clip.0.frame_crc32")) {
            longer = fc_malloc(strlen(f.meta_values[i]) + 9);
            sprintf(longer, "%s%.8s", f.meta_values[i], f.meta_values[i]);
            m[i].value = longer;
        }
    }
    int rc = longer ? st_write(copy, t, f.n, m, f.nmeta, err, sizeof err) : -1;
    size_t len = 0;
    uint8_t *bytes = rc ? NULL : test_read_file(copy, &len);
    rc = bytes ? shard_check_bytes(bytes, len, err, sizeof err) : 0;
    check(longer && rc == -1 && one_line(err) && strstr(err, "frame_crc32") && strstr(err, "characters"),
          "latent_shard_frame_crcs_too_long", "%d CRCs of 8 digits for clips of %d frames: %s", 2 * LF + 1, LF,
          rc ? err : "accepted");
    unlink(copy);
    free(bytes), free(longer), free(m), free(t);
    st_free(&f);
}

// A byte of clip 2's frame 3, mirrored, flipped: that unit alone fails, named; the others read.
static void test_latent_damage(const char *dir, const uint16_t *all) {
    char err[1024], bad[1024] = "";
    Dataset *d = dataset_open(dir, err, sizeof err);
    if (!d) return;
    ClipLocation loc;
    dataset_clip_location(d, 2, &loc);
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, loc.shard);
    flip_byte(path, (long)(loc.offset + (2 * 3 + 1) * UNIT * 2 + 5));
    float *out = fc_malloc(sizeof(float) * UNIT);
    int f3 = 3, f2 = 2;
    int rc_bad = dataset_read_latent_frames(d, 2, 1, &f3, 1, out, bad, sizeof bad);
    int rc_plain = dataset_read_latent_frames(d, 2, 1, &f3, 0, out, err, sizeof err);
    int ok_plain = !rc_plain && units_are(out, all, 2, 1, &f3, 0);
    int rc_other = dataset_read_latent_frames(d, 2, 1, &f2, 1, out, err, sizeof err);
    check(rc_bad == DATASET_CLIP_DAMAGED && one_line(bad) && strstr(bad, "frame 3 (mirrored): CRC32 mismatch") &&
              strstr(bad, loc.shard) && ok_plain && rc_other == 0,
          "latent_damaged_frame", "%s; the same frame unmirrored and frame 2 mirrored read fine", bad);
    uint8_t *whole = fc_malloc(dataset_clip_bytes(d));
    rc_bad = dataset_read_clip(d, 2, whole, err, sizeof err);
    free(whole);
    check(rc_bad == DATASET_CLIP_DAMAGED && strstr(err, "frame 3 (mirrored)"), "latent_damaged_clip", "%s", err);
    size_t len;
    uint8_t *bytes = test_read_file(path, &len);
    int rc = shard_check_bytes(bytes, len, err, sizeof err);
    check(rc && strstr(err, "frame 3 (mirrored): CRC32 mismatch"), "latent_shard_check", "%s", err);
    free(bytes), free(out);
    dataset_close(d);
}

// dataset.json edited: each a one-line refusal naming the file and what is wrong.
static void test_latent_refusals(const char *dir) {
    char path[600], err[1024];
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    size_t jlen;
    char *json = (char *)test_read_file(path, &jlen);
    static const struct {
        const char *name, *from, *to, *expect;
    } cases[] = {
        {"no_autoencoder", "\"autoencoder\"", "\"autoencoderX\"", "unknown key 'autoencoderX'"},
        {"version_1_latents", "\"format_version\": 2", "\"format_version\": 1", "'channels' belongs to a dataset of latents"},
        {"bad_sha", "\"sha256\": \"0", "\"sha256\": \"", "'sha256' must be 64 lowercase hex digits"},
        {"bad_family", "AutoencoderKL", "AutoencoderXL", "neither AutoencoderKL nor AutoencoderTiny"},
        {"image_size", "\"image_size\": 32", "\"image_size\": 33", "image_size 33 is not frame_size 4 times its factor 8"},
        {"scale_zero", "\"scale\": 0.18215", "\"scale\": 0", "'scale' must not be 0"},
        {"scale_text", "\"scale\": 0.18215", "\"scale\": \"x\"", "expected 'scale' (a number)"},
        {"scale_beyond_double", "\"scale\": 0.18215", "\"scale\": 1e400", "number 1e400 is out of range"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const char *at = strstr(json, cases[i].from);
        if (!at) {
            check(0, cases[i].name, "'%s' not in dataset.json", cases[i].from);
            continue;
        }
        size_t pre = (size_t)(at - json), fl = strlen(cases[i].from), tl = strlen(cases[i].to);
        char *text = fc_malloc(jlen + tl + 1);
        memcpy(text, json, pre);
        memcpy(text + pre, cases[i].to, tl);
        memcpy(text + pre + tl, at + fl, jlen - pre - fl);
        FILE *f = fopen(path, "wb");
        fwrite(text, 1, jlen - fl + tl, f);
        fclose(f);
        free(text);
        Dataset *d = dataset_open(dir, err, sizeof err);
        char label[96];
        snprintf(label, sizeof label, "latent_json_%s", cases[i].name);
        check(!d && one_line(err) && strstr(err, "dataset.json") && strstr(err, cases[i].expect), label, "%s", err);
        dataset_close(d);
    }
    FILE *f = fopen(path, "wb");
    fwrite(json, 1, jlen, f);
    fclose(f);
    free(json);
}

// ---- the loader over latents ----

static Config latent_config(const char *extra) {
    Config c;
    char err[512];
    config_defaults(&c);
    const char *kv[] = {"frame_size=4", "channels=4", "patch=2", "plan=anchor:-2 context:0 target:1 target:3", extra};
    for (int i = 0; i < 5; i++)
        if (kv[i] && config_set_checked(&c, kv[i], "test", err, sizeof err)) fc_die("%s", err);
    return c;
}

// Every window of 6 steps of 4 windows shows frames t0-2, t0, t0+1, t0+3 of one clip, mirrored or not, as
// stored; both flips occur; the same batches again from a loader started at step 4 (resuming).
static void test_latent_loader(const char *dir, const uint16_t *all) {
    char err[1024];
    Dataset *d = dataset_open(dir, err, sizeof err);
    if (!d) return;
    Config c = latent_config(NULL);
    const int B = 4, steps = 6;
    size_t window = 4 * UNIT;
    Loader *l = loader_start(NULL, d, &c, B, 0, 9, 1, 2, 2, err, sizeof err);
    check(l != NULL, "latent_loader_start", "%s", l ? "channels 4, frame_size 4 accepted" : err);
    if (!l) {
        dataset_close(d);
        return;
    }
    real *seen = fc_malloc(sizeof(real) * window * B * steps);
    int found = 0, flips[2] = {0, 0}, flip_as_drawn = 0;
    for (int s = 1; s <= steps; s++) {
        const real *b = loader_get(l, s, NULL, err, sizeof err);
        if (!b) break;
        memcpy(seen + (size_t)(s - 1) * B * window, b, sizeof(real) * window * B);
        for (int w = 0; w < B; w++) {
            float *win = fc_malloc(sizeof(float) * window);
            for (size_t e = 0; e < window; e++) win[e] = (float)b[w * window + e];
            int match = 0;
            for (int i = 0; i < LCLIPS && !match; i++)
                for (int t0 = 2; t0 + 3 < LF && !match; t0++)
                    for (int m = 0; m < 2 && !match; m++) {
                        int frames[4] = {t0 - 2, t0, t0 + 1, t0 + 3};
                        if (units_are(win, all, i, 4, frames, m)) match = 1, flips[m]++, flip_as_drawn +=
                            m == (int)(philox_u32(9, (uint32_t)s, RNG_AUG, LOADER_FLIP_BASE + (uint64_t)w) >> 31);
                    }
            found += match;
            free(win);
        }
    }
    loader_stop(l);
    check(found == B * steps && flips[0] && flips[1] && flip_as_drawn == found, "latent_loader_windows",
          "%d of %d windows are a clip's stored latents at the plan's offsets (%d as they are, %d mirrored; %d "
          "mirrored as the window's flip was drawn)", found, B * steps, flips[0], flips[1], flip_as_drawn);
    l = loader_start(NULL, d, &c, B, 0, 9, 4, 1, 1, err, sizeof err);
    int same = 0;
    for (int s = 4; l && s <= steps; s++) {
        const real *b = loader_get(l, s, NULL, err, sizeof err);
        same += b && !memcmp(b, seen + (size_t)(s - 1) * B * window, sizeof(real) * window * B);
    }
    loader_stop(l);
    check(same == 3, "latent_loader_resume", "%d of 3 batches from a loader started at step 4 (1 thread) equal the "
          "first loader's (2 threads)", same);
    // fast_fraction = 1: every window at twice the speed, frames t0 - 2, t0, t0 + 2 for a plan at -1, 0, 1
    Config cf = latent_config("fast_fraction=1");
    config_set(&cf, "plan=anchor:-1 context:0 target:1", "test");
    l = loader_start(NULL, d, &cf, B, 0, 9, 1, 1, 1, err, sizeof err);
    int fast = 0, fast_windows = 0;
    size_t fw = 3 * UNIT;
    float *win = fc_malloc(sizeof(float) * fw);
    for (int s = 1; l && s <= steps; s++) {
        const real *b = loader_get(l, s, NULL, err, sizeof err);
        for (int w = 0; b && w < B; w++, fast_windows++) {
            for (size_t e = 0; e < fw; e++) win[e] = (float)b[w * fw + e];
            int match = 0;
            for (int i = 0; i < LCLIPS && !match; i++)
                for (int t0 = 2; t0 + 2 < LF && !match; t0++)
                    for (int m = 0; m < 2 && !match; m++) match = units_are(win, all, i, 3, (int[]){t0 - 2, t0, t0 + 2}, m);
            fast += match;
        }
    }
    free(win);
    loader_stop(l);
    check(fast == B * steps && fast_windows == B * steps, "latent_loader_fast",
          "fast_fraction 1: %d of %d windows are a clip's latents at twice the plan's offsets", fast, B * steps);
    // what a latent dataset cannot train
    static const struct {
        const char *name, *set, *expect;
    } bad[] = {
        {"channels", "channels=3", "holds latents of 4 channels (AutoencoderKL), but the config has channels = 3"},
        {"frame_size", "frame_size=8", "frame_size 8 is not the dataset's latent side 4 (frames of 32 through an autoencoder of factor 8;"},
        {"crop_zoom", "crop_zoom=1.5", "crop_zoom > 1: both work on frames"},
        {"mix_shapes", "mix_shapes=0.5", "mix_shapes > 0: both work on frames"},
    };
    for (int i = 0; i < 4; i++) {
        Config cb = latent_config(bad[i].set);
        Loader *lb = loader_start(NULL, d, &cb, B, 0, 9, 1, 1, 1, err, sizeof err);
        char label[64];
        snprintf(label, sizeof label, "latent_loader_refuses_%s", bad[i].name);
        check(!lb && one_line(err) && strstr(err, bad[i].expect), label, "%s", lb ? "accepted" : err);
        loader_stop(lb);
    }
    free(seen);
    dataset_close(d);
}

// Values no prepare writes (inf, NaN) under a matching CRC: the unit holding them is refused as a
// damaged one, named with the value's place, and the loader's windows take the next good clip; the
// same clip's other frames read.
static void test_latent_nonfinite(const char *dir) {
    char err[1024], inf[1024] = "", nan[1024] = "";
    uint16_t *all = fc_malloc(sizeof(uint16_t) * CLIP_VALUES * LCLIPS);
    int rc = make_latent_dataset(dir, all, 1, err, sizeof err);
    Dataset *d = rc ? NULL : dataset_open(dir, err, sizeof err);
    if (!d) {
        check(0, "latent_nonfinite_setup", "%s", err);
        free(all);
        return;
    }
    float *out = fc_malloc(sizeof(float) * UNIT);
    int f4 = 4, f0 = 0;
    int rc_inf = dataset_read_latent_frames(d, 1, 1, &f4, 0, out, inf, sizeof inf);
    int rc_nan = dataset_read_latent_frames(d, 3, 1, &f0, 1, out, nan, sizeof nan);
    int others = !dataset_read_latent_frames(d, 1, 1, &f4, 1, out, err, sizeof err) && units_are(out, all, 1, 1, &f4, 1) &&
                 !dataset_read_latent_frames(d, 3, 1, &f0, 0, out, err, sizeof err) && units_are(out, all, 3, 1, &f0, 0);
    check(rc_inf == DATASET_CLIP_DAMAGED && one_line(inf) && strstr(inf, "clip.1") && strstr(inf, "frame 4: value 7 is inf") &&
              rc_nan == DATASET_CLIP_DAMAGED && strstr(nan, "frame 0 (mirrored): value 0 is NaN") && others,
          "latent_nonfinite_refused", "%s; %s; the same frames the other way read: %s", inf, nan, others ? "yes" : "no");
    // inspect's whole-shard check names it too
    ClipLocation loc;
    dataset_clip_location(d, 1, &loc);
    char path[600], why[1024] = "";
    snprintf(path, sizeof path, "%s/%s", dir, loc.shard);
    size_t len;
    uint8_t *bytes = test_read_file(path, &len);
    int checked = bytes ? shard_check_bytes(bytes, len, why, sizeof why) : 0;
    check(checked && one_line(why) && strstr(why, "frame 4: holds inf or NaN"), "latent_shard_check_nonfinite", "%s",
          why);
    free(bytes);
    // and the NaN of clip 3, the very first value of its unit (a check from the second value on passed it)
    dataset_clip_location(d, 3, &loc);
    snprintf(path, sizeof path, "%s/%s", dir, loc.shard);
    why[0] = 0;
    bytes = test_read_file(path, &len);
    checked = bytes ? shard_check_bytes(bytes, len, why, sizeof why) : 0;
    check(checked && one_line(why) && strstr(why, "frame 0 (mirrored): holds inf or NaN"),
          "latent_shard_check_nonfinite_first_value", "%s", why);
    free(bytes), free(out), free(all);
    dataset_close(d);
}

static void run_all(void) {
    test_half();
    test_sha256();
    test_identity_text();
    test_identity_same();
    char dir[512], err[1024];
    folder(dir, sizeof dir, "latents");
    uint16_t *all = fc_malloc(sizeof(uint16_t) * CLIP_VALUES * LCLIPS);
    int rc = make_latent_dataset(dir, all, 0, err, sizeof err);
    check(rc == 0, "latent_write", "%s", rc ? err : "5 clips of 6 frames of (4, 4, 4) latents, each frame also mirrored");
    if (!rc) {
        test_latent_roundtrip(dir, all);
        test_latent_loader(dir, all);
        test_latent_refusals(dir);
        test_latent_crc_text(dir);
        test_latent_damage(dir, all);
    }
    free(all);
    folder(dir, sizeof dir, "latents_nonfinite");
    test_latent_nonfinite(dir);
}

int main(void) { return run_in_scratch("latent_data", run_all); }
