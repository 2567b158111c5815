// test_image.c: still images (src/video/image.c): PNG and JPEG in every channel layout stb_image
// reads, made by the test itself, loaded as square frames; the centre crop; an exact PNG round trip;
// broken and wrong files, named in one line; a header claiming a vast size refused before a decoder
// allocates it; which paths are images; the smallest side a frame may be cut from; transparency over
// black; EXIF orientation. One PASS/FAIL line per check, with the measured figure; exit status 1 when
// any check failed.
#include "video_fixture.h"
#include "base/philox.h"
#include <zlib.h>

// A w x h image with `comp` channels, every pixel `px` (comp values); alpha, where there is one, is
// opaque (transparency: test_image_alpha).
static int write_solid(const char *path, int w, int h, int comp, const int *px, int jpeg) {
    uint8_t *img = malloc((size_t)w * h * comp);
    for (int i = 0; i < w * h; i++)
        for (int c = 0; c < comp; c++) {
            int alpha = (comp == 2 && c == 1) || (comp == 4 && c == 3);
            img[(size_t)i * comp + c] = (uint8_t)(alpha ? 255 : px[c]);
        }
    int ok = jpeg ? stbi_write_jpg(path, w, h, comp, img, 95) : stbi_write_png(path, w, h, comp, img, w * comp);
    free(img);
    return ok ? 0 : -1;
}

static void test_image_solid(const char *name, int w, int h, int comp, const int *px, int jpeg, int r, int g, int b) {
    char err[512] = "", cname[96];
    const char *path = tmp_path(name);
    uint8_t rgb[32 * 32 * 3];
    snprintf(cname, sizeof cname, "image_%s", name);
    if (write_solid(path, w, h, comp, px, jpeg) < 0) {
        check(0, cname, "stb_image_write could not write %s", path);
        return;
    }
    int rc = image_load_square(path, 32, rgb, err, sizeof err);
    int dev = rc == 0 ? max_dev(rgb, 32, r, g, b) : -1;
    check(rc == 0 && dev <= 2, cname,
          "%dx%d, %d channel%s %s at 32x32: largest deviation from (%d,%d,%d) %d levels%s%s", w, h, comp,
          comp > 1 ? "s" : "", jpeg ? "JPEG" : "PNG", r, g, b, dev, rc ? ": " : "", err);
}

static void test_image_solids(void) {
    int gray[1] = {77}, ga[2] = {200, 255}, rgba[4] = {10, 200, 90, 255}, rgb[3] = {250, 128, 3};
    int tall[3] = {40, 80, 160};
    int jrgb[3] = {200, 100, 50}, jgray[1] = {130};
    test_image_solid("gray.png", 50, 40, 1, gray, 0, 77, 77, 77);
    test_image_solid("gray_alpha.png", 40, 50, 2, ga, 0, 200, 200, 200);
    test_image_solid("rgba.png", 64, 64, 4, rgba, 0, 10, 200, 90);
    test_image_solid("odd_101x67.png", 101, 67, 3, rgb, 0, 250, 128, 3);
    test_image_solid("tall_30x120.png", 30, 120, 3, tall, 0, 40, 80, 160);
    test_image_solid("rgb.jpg", 64, 48, 3, jrgb, 1, 200, 100, 50);
    test_image_solid("gray_33x77.JPEG", 33, 77, 1, jgray, 1, 130, 130, 130);
}

// Exact round trip at the same size through image_write_png.
static void test_image_roundtrip(void) {
    char err[512] = "";
    int s = 48;
    uint8_t *img = malloc((size_t)s * s * 3), *back = malloc((size_t)s * s * 3);
    for (int i = 0; i < s * s * 3; i++) img[i] = (uint8_t)((i * 37) ^ (i >> 5));
    int rc = image_write_png(tmp_path("roundtrip.png"), s, s, img);
    int rc2 = rc == 0 ? image_load_square(tmp_path("roundtrip.png"), s, back, err, sizeof err) : -1;
    int diff = 0;
    for (int i = 0; rc2 == 0 && i < s * s * 3; i++) diff = abs(img[i] - back[i]) > diff ? abs(img[i] - back[i]) : diff;
    check(rc == 0 && rc2 == 0 && diff == 0, "image_png_roundtrip",
          "write %d, load %d, largest difference %d at %dx%d %s", rc, rc2, diff, s, s, err);
    free(img);
    free(back);
}

// Centre crop: a 2:1 and a 1:2 picture with a marker in the middle, at 50x50.
static void test_image_crop(void) {
    char err[512] = "";
    uint8_t out[50 * 50 * 3];
    const struct { const char *name; int w, h; } mk[2] = {{"wide_200x100.png", 200, 100},
                                                          {"tall_100x200.png", 100, 200}};
    for (int k = 0; k < 2; k++) {
        uint8_t *pic = malloc((size_t)mk[k].w * mk[k].h * 3);
        marker_frame(0, mk[k].w, mk[k].h, pic);
        stbi_write_png(tmp_path(mk[k].name), mk[k].w, mk[k].h, 3, pic, mk[k].w * 3);
        free(pic);
        int rc = image_load_square(tmp_path(mk[k].name), 50, out, err, sizeof err);
        char cname[64];
        snprintf(cname, sizeof cname, "image_crop_%s", k ? "tall" : "wide");
        if (rc) check(0, cname, "%s", err);
        else check_marker(cname, mk[k].name, out, 50);
    }
}

// Broken and wrong inputs (made from test_image_solids' files): a clean -1 with the file named, or
// (truncated JPEG) a picture.
static void test_image_bad(void) {
    char err[512] = "";
    uint8_t out[32 * 32 * 3];
    size_t n = 0;
    uint8_t *png = test_read_file(tmp_path("odd_101x67.png"), &n);
    uint8_t *jpg = NULL;
    size_t nj = 0;
    jpg = test_read_file(tmp_path("rgb.jpg"), &nj);
    if (png) write_bytes(tmp_path("truncated.png"), png, n / 2);
    if (jpg) write_bytes(tmp_path("truncated.jpg"), jpg, nj / 2);
    write_bytes(tmp_path("text.png"), "this is not an image\n", 21);
    write_bytes(tmp_path("empty.jpg"), "", 0);
    const char *bad[5] = {"truncated.png", "text.png", "empty.jpg", "missing.png", ""};
    for (int k = 0; k < 5; k++) {
        const char *p = k == 4 ? g_dir : tmp_path(bad[k]);
        err[0] = 0;
        int rc = image_load_square(p, 32, out, err, sizeof err);
        char cname[64];
        snprintf(cname, sizeof cname, "image_bad_%s", k == 4 ? "directory" : bad[k]);
        check(rc == -1 && strstr(err, p) && !strchr(err, '\n'), cname, "returns %d: %s", rc, err);
    }
    // A Huffman table claiming 512 codes: stb_image 2.27 writes past its tables on this one.
    int dht = -1;
    for (size_t i = 0; jpg && i + 21 < nj; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xC4) {
            dht = (int)i;
            memset(jpg + i + 5, 0x20, 16);
            break;
        }
    if (dht >= 0) write_bytes(tmp_path("bad_huffman.jpg"), jpg, nj);
    err[0] = 0;
    int rc = dht >= 0 ? image_load_square(tmp_path("bad_huffman.jpg"), 32, out, err, sizeof err) : 0;
    check(dht >= 0 && rc == -1 && strstr(err, "bad_huffman.jpg"), "image_bad_huffman.jpg",
          "table at byte %d, returns %d: %s", dht, rc, err);
    // A JPEG damaged part-way, which stb_image decodes into a picture anyway (it fills what it cannot
    // read): cut in half, a stretch of its coded data zeroed, a header claiming ten times the rows and
    // columns its data holds. Each refused in one line naming it (FFmpeg's decoder checks it first).
    uint8_t noise[96 * 64 * 3];
    for (size_t i = 0; i < sizeof noise; i++) noise[i] = (uint8_t)(philox_u32(5, 0, RNG_TEST, i) & 0xff);
    stbi_write_jpg(tmp_path("noise.jpg"), 96, 64, 3, noise, 90);
    size_t nn = 0;
    uint8_t *nj_bytes = test_read_file(tmp_path("noise.jpg"), &nn);
    int damaged = 0, sof = -1;
    char dwhy[3][600] = {"", "", ""};
    for (size_t i = 0; nj_bytes && i + 9 < nn; i++)
        if (nj_bytes[i] == 0xFF && nj_bytes[i + 1] == 0xC0) sof = (int)i;
    if (nj_bytes && sof > 0) {
        write_bytes(tmp_path("cut.jpg"), nj_bytes, nn / 2);
        uint8_t *z = malloc(nn);
        memcpy(z, nj_bytes, nn);
        memset(z + nn / 2, 0, nn / 8);
        write_bytes(tmp_path("zeroed.jpg"), z, nn);
        memcpy(z, nj_bytes, nn);
        z[sof + 5] = 0x02, z[sof + 6] = 0x80, z[sof + 7] = 0x03, z[sof + 8] = 0xC0;  // 640 rows, 960 columns
        write_bytes(tmp_path("claims_more.jpg"), z, nn);
        free(z);
        const char *names[3] = {"cut.jpg", "zeroed.jpg", "claims_more.jpg"};
        for (int k = 0; k < 3; k++) {
            err[0] = 0;
            rc = image_load_square(tmp_path(names[k]), 32, out, err, sizeof err);
            damaged += rc == -1 && strstr(err, names[k]) && !strchr(err, '\n') &&
                       (strstr(err, "a damaged JPEG") || strstr(err, "Corrupt JPEG"));  // (FFmpeg's words or stb's)
            snprintf(dwhy[k], sizeof dwhy[k], "%s: %s", names[k], rc ? err : "decoded");
        }
    }
    err[0] = 0;
    int whole = image_load_square(tmp_path("noise.jpg"), 32, out, err, sizeof err) == 0;
    check(damaged == 3 && whole, "image_bad_damaged_jpeg", "%d of 3 refused (%s; %s; %s); the whole file read: %s",
          damaged, dwhy[0], dwhy[1], dwhy[2], whole ? "yes" : err);
    free(nj_bytes);
    // A PNG whose side passes stb_image's 2^24 (40 megapixels: under the limit on pixels) is called too
    // wide, not 'not a PNG'
    if (png && n > 24) {
        memcpy(png + 16, "\x01\x31\x2d\x00\x00\x00\x00\x02", 8);  // IHDR: 20000000 x 2
        write_bytes(tmp_path("wide.png"), png, n);
    }
    err[0] = 0;
    rc = image_load_square(tmp_path("wide.png"), 32, out, err, sizeof err);
    check(rc == -1 && strstr(err, "wide.png: a PNG of 20000000x2 pixels, too wide or tall to read (at most 16777216 "
          "on a side)"), "image_bad_wide_png", "returns %d: %s", rc, err);
    free(png);
    free(jpg);
}

// image_check_size, the guard before FFmpeg reads a still: a PNG header claiming 100000x100000 pixels
// is refused in image_load_square's words, naming the file and the size; an ordinary PNG or JPEG, a
// file that is no image and one stb_image must not parse (bad_huffman.jpg) are left to the decoder (0).
static void test_image_check_size(void) {
    char err[512] = "", load_err[512] = "";
    uint8_t out[32 * 32 * 3];
    size_t n = 0;
    uint8_t *png = test_read_file(tmp_path("odd_101x67.png"), &n);
    if (png && n > 24) {
        memcpy(png + 16, "\x00\x01\x86\xa0\x00\x01\x86\xa0", 8);  // IHDR: 100000 x 100000
        write_bytes(tmp_path("bomb.png"), png, n);
    }
    int rc = image_check_size(tmp_path("bomb.png"), err, sizeof err);
    int rc_load = image_load_square(tmp_path("bomb.png"), 32, out, load_err, sizeof load_err);
    check(png && rc == -1 && rc_load == -1 && strstr(err, "bomb.png: a PNG of 100000x100000 pixels, too large") &&
              !strcmp(err, load_err), "image_check_size_bomb", "returns %d: %s; the loader: %s", rc, err, load_err);
    const char *fine[] = {"odd_101x67.png", "rgb.jpg", "text.png", "truncated.png", "bad_huffman.jpg", "missing.png"};
    int wrong = 0;
    for (size_t k = 0; k < sizeof fine / sizeof fine[0]; k++)
        if (image_check_size(tmp_path(fine[k]), err, sizeof err)) wrong++, printf("  %s: %s\n", fine[k], err);
    check(wrong == 0, "image_check_size_leaves_others", "%d of %zu files refused", wrong, sizeof fine / sizeof fine[0]);
    free(png);
}

static void test_image_paths(void) {
    const struct { const char *p; int want; } ip[] = {
        {"a.png", 1}, {"dir/b.PNG", 1}, {"c.JpEg", 1}, {"d.jpg", 1}, {"e.mp4", 0}, {"png", 0}, {"x.png/y", 0},
        {".png", 0}, {"f.png.txt", 0}, {"g.jpe", 1}, {"h.JFIF", 1}, {"i.jpg2", 0}};
    int wrong = 0;
    for (size_t k = 0; k < sizeof ip / sizeof ip[0]; k++) wrong += is_image_path(ip[k].p) != ip[k].want;
    check(wrong == 0, "image_is_image_path", "%d of %zu paths classified wrongly", wrong, sizeof ip / sizeof ip[0]);
}

// An image that must fill frames of a side (image_load_square_min) is refused when either side is
// shorter, not upscaled; one with both sides long enough is taken.
static void test_image_min_side(void) {
    const int grey[3] = {110, 110, 110};
    const struct { int w, h, ok; } sz[] = {{64, 20, 0}, {20, 64, 0}, {31, 31, 0}, {40, 32, 1}, {32, 32, 1}};
    int wrong = 0;
    char what[256] = "";
    for (size_t k = 0; k < sizeof sz / sizeof sz[0]; k++) {
        char name[32], err[512] = "";
        snprintf(name, sizeof name, "side_%dx%d.png", sz[k].w, sz[k].h);
        uint8_t out[32 * 32 * 3];
        int rc = write_solid(tmp_path(name), sz[k].w, sz[k].h, 3, grey, 0) ? -2
                 : image_load_square_min(tmp_path(name), 32, 32, out, err, sizeof err);
        int refused = rc == -1 && strstr(err, "smaller than the 32x32");
        if (sz[k].ok ? rc != 0 : !refused) {
            wrong++;
            snprintf(what, sizeof what, "; %dx%d returns %d %s", sz[k].w, sz[k].h, rc, err);
        }
    }
    check(wrong == 0, "image_min_side", "%d of %zu images at 32x32 frames judged wrongly (64x20, 20x64 and 31x31 "
          "refused; 40x32 and 32x32 taken)%s", wrong, sizeof sz / sizeof sz[0], what);
}

// Transparency is composited over black: a 64x64 RGBA PNG whose left half is transparent over a stored
// magenta, its right half opaque green but for the bottom-right quarter at alpha 128; and a gray+alpha
// one, transparent over white on its left. At the same size every pixel is exact (c * a / 255, rounded).
static void test_image_alpha(void) {
    uint8_t rgba[64 * 64 * 4], ga[64 * 64 * 2], out[64 * 64 * 3];
    for (int y = 0; y < 64; y++)
        for (int x = 0; x < 64; x++) {
            uint8_t *p = rgba + 4 * (y * 64 + x), *q = ga + 2 * (y * 64 + x);
            p[0] = x < 32 ? 255 : 0, p[1] = x < 32 ? 0 : 255, p[2] = x < 32 ? 255 : 0;
            p[3] = x < 32 ? 0 : y >= 32 ? 128 : 255;
            q[0] = 255, q[1] = x < 32 ? 0 : 255;
        }
    int bad = 0, rc[2];
    char err[512] = "", first[128] = "";
    stbi_write_png(tmp_path("hidden_magenta.png"), 64, 64, 4, rgba, 64 * 4);
    stbi_write_png(tmp_path("hidden_white.png"), 64, 64, 2, ga, 64 * 2);
    for (int k = 0; k < 2; k++) {
        rc[k] = image_load_square(tmp_path(k ? "hidden_white.png" : "hidden_magenta.png"), 64, out, err, sizeof err);
        for (int i = 0; rc[k] == 0 && i < 64 * 64; i++) {
            int x = i % 64, y = i / 64;
            int want[3] = {0, 0, 0};
            if (k == 0 && x >= 32) want[1] = y >= 32 ? 128 : 255;  // 255 * 128 / 255
            if (k == 1 && x >= 32) want[0] = want[1] = want[2] = 255;
            if (out[3 * i] != want[0] || out[3 * i + 1] != want[1] || out[3 * i + 2] != want[2]) {
                if (!bad++)
                    snprintf(first, sizeof first, "; first wrong: image %d (%d, %d) = %d,%d,%d, want %d,%d,%d", k, x,
                             y, out[3 * i], out[3 * i + 1], out[3 * i + 2], want[0], want[1], want[2]);
            }
        }
    }
    check(rc[0] == 0 && rc[1] == 0 && bad == 0, "image_alpha_over_black",
          "load %d, %d; %d pixels not the colour over black%s %s", rc[0], rc[1], bad, first, err);
}

// A w x h PNG of 16 bits a sample (colour type 0 grey, 2 RGB or 6 RGBA: comp 1, 3 or 4), every pixel
// px: written here, as stb_image_write writes 8 bits only.
static int write_png16(const char *path, int w, int h, int comp, const uint16_t *px) {
    size_t row = 1 + (size_t)w * comp * 2, raw_n = row * h;
    uint8_t *raw = calloc(raw_n, 1), *z = malloc(compressBound(raw_n) + 64);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < comp; c++) {
                uint8_t *o = raw + y * row + 1 + ((size_t)x * comp + c) * 2;
                o[0] = (uint8_t)(px[c] >> 8), o[1] = (uint8_t)px[c];
            }
    uLongf zn = compressBound(raw_n);
    int ok = compress(z, &zn, raw, raw_n) == Z_OK;
    FILE *f = fopen(path, "wb");
    ok = ok && f;
    const uint8_t type = comp == 1 ? 0 : comp == 3 ? 2 : 6;
    uint8_t ihdr[13] = {(uint8_t)(w >> 24), (uint8_t)(w >> 16), (uint8_t)(w >> 8), (uint8_t)w, (uint8_t)(h >> 24),
                        (uint8_t)(h >> 16), (uint8_t)(h >> 8), (uint8_t)h, 16, type, 0, 0, 0};
    const struct { const char *tag; const uint8_t *data; size_t n; } chunk[3] = {
        {"IHDR", ihdr, 13}, {"IDAT", z, zn}, {"IEND", NULL, 0}};
    if (ok) fwrite("\x89PNG\r\n\x1a\n", 1, 8, f);
    for (int k = 0; ok && k < 3; k++) {
        uint8_t be[4] = {(uint8_t)(chunk[k].n >> 24), (uint8_t)(chunk[k].n >> 16), (uint8_t)(chunk[k].n >> 8),
                         (uint8_t)chunk[k].n};
        uLong crc = crc32(crc32(0, (const Bytef *)chunk[k].tag, 4), chunk[k].data, (uInt)chunk[k].n);
        uint8_t cb[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
        ok = fwrite(be, 1, 4, f) == 4 && fwrite(chunk[k].tag, 1, 4, f) == 4 &&
             (chunk[k].n == 0 || fwrite(chunk[k].data, 1, chunk[k].n, f) == chunk[k].n) && fwrite(cb, 1, 4, f) == 4;
    }
    if (f && fclose(f)) ok = 0;
    free(raw), free(z);
    return ok ? 0 : -1;
}

// 16-bit PNGs rounded to 8 bits, round(v * 255 / 65535), not cut to their high byte (which reads
// 0x64FF as 100 where it is 100.6, 101): grey, RGB, and RGBA over black (round(c * a * 255 / 65535^2)).
static void test_image_16bit(void) {
    const struct {
        const char *name;
        int comp;
        uint16_t px[4];
        int want[3];
    } im[] = {
        {"deep_grey.png", 1, {0x64FF}, {101, 101, 101}},
        {"deep_rgb.png", 3, {0x64FF, 0x32F0, 0xFAF0}, {101, 51, 250}},
        // at alpha 0x64FF: 0x64FF 39.7, 0xFFFF 100.6 (the high bytes: 100 * 100 / 255 = 39.2, and 100)
        {"deep_rgba.png", 4, {0x64FF, 0xFFFF, 0x0000, 0x64FF}, {40, 101, 0}},
    };
    for (size_t k = 0; k < sizeof im / sizeof im[0]; k++) {
        char err[512] = "", cname[64];
        uint8_t rgb[32 * 32 * 3];
        snprintf(cname, sizeof cname, "image_16bit_%s", im[k].name);
        int wrote = write_png16(tmp_path(im[k].name), 32, 32, im[k].comp, im[k].px);
        int rc = wrote == 0 ? image_load_square(tmp_path(im[k].name), 32, rgb, err, sizeof err) : -1;
        int dev = rc == 0 ? max_dev(rgb, 32, im[k].want[0], im[k].want[1], im[k].want[2]) : -1;
        check(rc == 0 && dev == 0, cname, "written %d, loaded %d: (%d,%d,%d), want (%d,%d,%d) exactly %s", wrote, rc,
              rgb[0], rgb[1], rgb[2], im[k].want[0], im[k].want[1], im[k].want[2], err);
    }
}

// A JPEG with an APP1 Exif block right after SOI holding only Orientation = o, in big-endian (MM) or
// little-endian (II) TIFF order; `damage` points IFD0 past the block's end instead.
static int write_exif_jpeg(const char *path, const uint8_t *jpg, size_t n, int o, int le, int damage) {
    uint8_t app[36] = {0xFF, 0xE1, 0, 34, 'E', 'x', 'i', 'f', 0, 0};
    uint8_t *t = app + 10;  // 26 bytes of TIFF: header, IFD0 of one entry, no next IFD
    const uint8_t head[2][8] = {{'M', 'M', 0, 42, 0, 0, 0, 8}, {'I', 'I', 42, 0, 8, 0, 0, 0}};
    memcpy(t, head[le], 8);
    if (damage) t[le ? 4 : 7] = 200;
    uint8_t entry[14] = {0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, (uint8_t)o, 0, 0};  // big-endian
    if (le) {
        const uint8_t little[14] = {1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, (uint8_t)o, 0, 0, 0};
        memcpy(entry, little, 14);
    }
    memcpy(t + 8, entry, 14);
    uint8_t *buf = malloc(n + sizeof app);
    memcpy(buf, jpg, 2);
    memcpy(buf + 2, app, sizeof app);
    memcpy(buf + 2 + sizeof app, jpg + 2, n - 2);
    int rc = write_bytes(path, buf, n + sizeof app);
    free(buf);
    return rc;
}

// EXIF orientation is applied: a 64x48 JPEG of four coloured quadrants with Orientation 6 (turn 90
// degrees clockwise), 3 (180), 2 (mirrored) and 5 (transposed), in both byte orders, equals the
// plain JPEG's frame turned by hand; a damaged Exif block is ignored (the plain frame).
static void test_image_exif(void) {
    const int S = 32;
    uint8_t pic[64 * 48 * 3], plain[32 * 32 * 3], got[32 * 32 * 3];
    for (int y = 0; y < 48; y++)
        for (int x = 0; x < 64; x++) {
            uint8_t *p = pic + 3 * (y * 64 + x);
            int q = (y >= 24) * 2 + (x >= 32);
            p[0] = q == 0 || q == 3 ? 230 : 20, p[1] = q == 1 || q == 3 ? 230 : 20, p[2] = q == 2 || q == 3 ? 230 : 20;
            if (x < 40 && y < 10) p[0] = p[1] = p[2] = 0;  // a bar along the top: no quadrant turn is a mirror
        }
    char err[512] = "";
    size_t n = 0;
    stbi_write_jpg(tmp_path("plain.jpg"), 64, 48, 3, pic, 95);
    uint8_t *jpg = test_read_file(tmp_path("plain.jpg"), &n);
    if (!jpg || image_load_square(tmp_path("plain.jpg"), S, plain, err, sizeof err)) {
        check(0, "image_exif_orientation", "the plain JPEG: %s", err);
        free(jpg);
        return;
    }
    const struct { int o, le, damage; } cs[] = {{6, 0, 0}, {3, 1, 0}, {2, 1, 0}, {5, 0, 0}, {6, 1, 1}};
    char what[512] = "";
    int wrong = 0;
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "exif%d_%s%s.jpg", cs[k].o, cs[k].le ? "II" : "MM", cs[k].damage ? "_bad" : "");
        int rc = write_exif_jpeg(tmp_path(name), jpg, n, cs[k].o, cs[k].le, cs[k].damage) ? -2
                 : image_load_square(tmp_path(name), S, got, err, sizeof err);
        int diff = 0;
        for (int y = 0; rc == 0 && y < S; y++)
            for (int x = 0; x < S; x++) {
                int sy = y, sx = x;  // the plain frame's pixel that (x, y) shows
                if (!cs[k].damage && cs[k].o == 6) sy = S - 1 - x, sx = y;
                if (!cs[k].damage && cs[k].o == 3) sy = S - 1 - y, sx = S - 1 - x;
                if (!cs[k].damage && cs[k].o == 2) sx = S - 1 - x;
                if (!cs[k].damage && cs[k].o == 5) sy = x, sx = y;
                for (int c = 0; c < 3; c++) {
                    int d = abs(got[3 * (y * S + x) + c] - plain[3 * (sy * S + sx) + c]);
                    diff = d > diff ? d : diff;
                }
            }
        if (rc != 0 || diff > 0) {
            wrong++;
            snprintf(what + strlen(what), sizeof what - strlen(what), "; %s: load %d, largest difference %d %s", name,
                     rc, diff, rc ? err : "");
        }
    }
    check(wrong == 0, "image_exif_orientation", "%d of %zu JPEGs (orientation 6 MM, 3 II, 2 II, 5 MM, a damaged "
          "block) not the plain frame turned by hand%s", wrong, sizeof cs / sizeof cs[0], what);
    // JPEG's other names (.jfif, .jpe) take the same path: their orientation applied too
    uint8_t named[32 * 32 * 3], as_jpg[32 * 32 * 3];
    int same = !write_exif_jpeg(tmp_path("exif6.jfif"), jpg, n, 6, 0, 0) &&
               !image_load_square(tmp_path("exif6.jfif"), S, named, err, sizeof err) &&
               !image_load_square(tmp_path("exif6_MM.jpg"), S, as_jpg, err, sizeof err) &&
               !memcmp(named, as_jpg, sizeof named) && memcmp(named, plain, sizeof named);
    check(same, "image_exif_jfif", "exif6.jfif read as exif6_MM.jpg (turned): %s", same ? "yes" : err[0] ? err : "no");
    free(jpg);
}

static void test_images(void) {
    test_image_solids();
    test_image_roundtrip();
    test_image_crop();
    test_image_bad();
    test_image_check_size();
    test_image_paths();
    test_image_min_side();
    test_image_alpha();
    test_image_16bit();
    test_image_exif();
}

int main(void) { return run_in_scratch("image", test_images); }
