// test_base.c: the base layer: Philox against the published known-answer vectors and its
// distributions (the uniform's open interval at the extreme words too), and the config reader and
// writer.
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/config.h"
#include "base/philox.h"

static void test_philox_kat(void) {
    // Random123's kat_vectors for philox4x32_10.
    static const uint32_t cases[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
         0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
         0x5001e420, 0x24126ea1},
    };
    for (int c = 0; c < 3; c++) {
        uint32_t out[4];
        philox4x32_10(cases[c], cases[c] + 4, out);
        int ok = !memcmp(out, cases[c] + 6, sizeof out);
        char name[64];
        snprintf(name, sizeof name, "philox_known_answer_%d", c);
        check(ok, name, "got %08x %08x %08x %08x", out[0], out[1], out[2], out[3]);
    }
}

// The layout docs/network.md ("Randomness") gives, so another implementation can draw the same
// numbers: counter (index / 4 low and high words, step, stream), key (seed low and high words),
// word index % 4 of the block; the uniform (w >> 8 + 0.5) 2^-24; the normals r cos a (even index) and
// r sin a (odd) with r = sqrt(-2 ln u) and a = 2 pi u' from the pair's first and second uniforms.
static void test_philox_layout(void) {
    const uint64_t seeds[] = {1, 0x123456789abcdefull};
    const uint32_t steps[] = {0, 7, 0xfffffffeu}, streams[] = {RNG_NOISE, RNG_TEST};
    const uint64_t indices[] = {0, 1, 2, 3, 6, 4ull << 32 | 5, (1ull << 34) + 3};
    int words = 1, uniforms = 1, normals = 1;
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 2; c++)
                for (int d = 0; d < 7; d++) {
                    uint64_t seed = seeds[a], i = indices[d];
                    uint32_t ctr[4] = {(uint32_t)(i / 4), (uint32_t)(i / 4 >> 32), steps[b], streams[c]};
                    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, w[4];
                    philox4x32_10(ctr, key, w);
                    words &= philox_u32(seed, steps[b], streams[c], i) == w[i % 4];
                    uniforms &= philox_uniform(seed, steps[b], streams[c], i) == ((w[i % 4] >> 8) + 0.5) / 16777216.0;
                    int p = (int)(i % 4) & 2;
                    double r = sqrt(-2 * log(((w[p] >> 8) + 0.5) / 16777216.0));
                    double angle = 2 * M_PI * (((w[p + 1] >> 8) + 0.5) / 16777216.0);
                    normals &= philox_normal(seed, steps[b], streams[c], i) == (i % 2 ? r * sin(angle) : r * cos(angle));
                }
    check(words && uniforms && normals, "philox_documented_layout",
          "words %s, uniforms %s, normals %s the counter, key and formulas of docs/network.md", words ? "follow" : "DO NOT follow",
          uniforms ? "follow" : "DO NOT follow", normals ? "follow" : "DO NOT follow");
}

static void test_philox_distributions(void) {
    enum { N = 200000 };
    double su = 0, su2 = 0, sn = 0, sn2 = 0, umin = 1, umax = 0;
    for (int i = 0; i < N; i++) {
        double u = philox_uniform(42, 7, RNG_NOISE, i), z = philox_normal(42, 7, RNG_NOISE, i);
        su += u, su2 += u * u, sn += z, sn2 += z * z;
        if (u < umin) umin = u;
        if (u > umax) umax = u;
    }
    double um = su / N, uv = su2 / N - um * um, nm = sn / N, nv = sn2 / N - nm * nm;
    // 5 standard errors
    check(fabs(um - 0.5) < 5 * sqrt(1.0 / 12 / N) && fabs(uv - 1.0 / 12) < 0.002 && umin > 0 && umax < 1,
          "philox_uniform_moments", "mean %.5f var %.5f range (%.2e, 1-%.2e)", um, uv, umin, 1 - umax);
    check(fabs(nm) < 5 / sqrt((double)N) && fabs(nv - 1) < 0.01, "philox_normal_moments", "mean %.5f var %.5f", nm,
          nv);
    // keys and counters separate the streams
    int differ = philox_u32(1, 0, RNG_NOISE, 0) != philox_u32(2, 0, RNG_NOISE, 0) &&
                 philox_u32(1, 0, RNG_NOISE, 0) != philox_u32(1, 1, RNG_NOISE, 0) &&
                 philox_u32(1, 0, RNG_NOISE, 0) != philox_u32(1, 0, RNG_TIME, 0) &&
                 philox_u32(1, 0, RNG_NOISE, 0) != philox_u32(1, 0, RNG_NOISE, 1);
    check(differ, "philox_streams_differ", "seed, step, stream and index each change the draw");
    // the fill (by blocks of 4 indices) is the element-wise function, whatever the offset and
    // length: over one block or many, and where the block counter carries into its second word
    static real buf[1031];
    const uint64_t offsets[] = {1000, 1001, 3, 0, 6, 5, 4 * 0xffffffffull - 37};
    const size_t lens[] = {64, 67, 1, 2, 5, 1031, 300};
    int same = 1;
    for (int c = 0; c < 7; c++) {
        for (size_t i = 0; i < lens[c]; i++) buf[i] = -99;
        philox_fill_normal(buf, lens[c], (real)0.25, (real)1.5, 9, 3, RNG_NOISE, offsets[c]);
        for (size_t i = 0; i < lens[c]; i++)
            same &= buf[i] == (real)((real)0.25 + (real)1.5 * philox_normal(9, 3, RNG_NOISE, offsets[c] + i));
    }
    check(same, "philox_fill_matches_elementwise",
          "lengths 64, 67, 1, 2, 5, 1031, 300 at offsets 1000, 1001, 3, 0, 6, 5 and 2^34 - 41 (the counter's "
          "carry): the same bytes as philox_normal value by value");

    // The ends of (0, 1) are never drawn, even from the extreme words: index 59265826 of seed 1's test
    // stream is a word whose top 24 bits are all 0 and index 2108150 one whose top 24 are all 1 (found by
    // search). The normal whose logarithm takes the first word, alone and through the fill, stays finite.
    const uint64_t low = 59265826, high = 2108150;
    uint32_t wl = philox_u32(1, 0, RNG_TEST, low), wh = philox_u32(1, 0, RNG_TEST, high);
    double ul = philox_uniform(1, 0, RNG_TEST, low), uh = philox_uniform(1, 0, RNG_TEST, high);
    double z = philox_normal(1, 0, RNG_TEST, low);
    real fill[4];
    philox_fill_normal(fill, 4, 0, 1, 1, 0, RNG_TEST, low & ~(uint64_t)3);
    int fill_finite = 1;
    for (int k = 0; k < 4; k++) fill_finite &= isfinite((double)fill[k]);
    check(wl >> 8 == 0 && wh >> 8 == 0xFFFFFF && ul > 0 && uh < 1 && isfinite(z) && fill_finite,
          "philox_uniform_open_interval", "words %08x and %08x give uniforms %.3g and 1-%.3g; the normal %g, the "
          "fill's 4 values %s", wl, wh, ul, 1 - uh, z, fill_finite ? "finite" : "not all finite");
}

static void test_config_roundtrip(void) {
    Config a, b;
    config_defaults(&a);
    config_set(&a, "width=96", "test");
    config_set(&a, "plan=anchor:0 context:4 target:8 target:12", "test");
    config_set(&a, "t_logit_mean=-0.5", "test");
    char path[] = "/tmp/framechain-test-config-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    config_write(&a, f);
    fclose(f);
    config_defaults(&b);
    config_load(&b, path);
    unlink(path);
    int ok = b.width == 96 && b.slots == 4 && b.slot_kind[1] == SLOT_CONTEXT && b.slot_offset[3] == 12 &&
             b.t_logit_mean == -0.5;
    char plan[256];
    config_get(&b, "plan", plan, sizeof plan);
    check(ok && !strcmp(plan, "anchor:0 context:4 target:8 target:12"), "config_write_then_load",
          "width %d, %d slots, plan '%s'", b.width, b.slots, plan);
}

// Values a config must refuse, each with a line naming what is wrong, and the edge of one it must take:
// a plan of 33 slots (the arrays hold 32), two anchors, a double that is not a number, keep_blocks past
// depth, an odd freq_dim, a plan offset one past 10^6 either way; keep_blocks equal to depth and plan
// offsets of exactly +-10^6 accepted.
static void test_config_refusals(void) {
    char plan33[400] = "plan=anchor:0";
    for (int k = 1; k <= 32; k++) snprintf(plan33 + strlen(plan33), sizeof plan33 - strlen(plan33), " target:%d", k);
    const struct { const char *kv, *want; } bad[] = {
        {plan33, "more than 32 slots"},
        {"plan=anchor:0 anchor:1 target:2", "2 anchor slots, expected exactly one"},
        {"lr=nan", "not a number"},
        {"delta_scale=inf", "not a number"},
        {"lr=0x1p-10", "not a decimal number"},  // strtod reads hexadecimal; the command line refuses it too
        {"weight_decay=0x1", "not a decimal number"},
        {"plan=anchor:0 target:0x1", "slot offset is not a number"},
        {"batch_size=99999999999999999999", "99999999999999999999 is out of range [1, 65536]"},  // past 64 bits
        {"seed=9223372036854775808", "9223372036854775808 is out of range"},
        {"keep_blocks=3", "keep_blocks 3 is more than depth 2"},
        {"freq_dim=63", "freq_dim 63 is not even"},  // the sinusoid fills 2 x (d / 2) inputs
        {"plan=anchor:0 target:1000001", "is out of range [-1e+06, 1e+06]"},  // one past the largest offset
        {"plan=anchor:0 target:-1000001", "is out of range [-1e+06, 1e+06]"},
    };
    int refused = 0, n = (int)(sizeof bad / sizeof bad[0]);
    char err[512], why[700] = "";
    for (int i = 0; i < n; i++) {
        Config c;
        config_defaults(&c);
        config_load(&c, "configs/tiny/starter.conf");
        config_set(&c, "recompute=1", "test");
        Config before;
        memcpy(&before, &c, sizeof c);  // padding too: compared byte for byte below
        int rc = config_set_checked(&c, bad[i].kv, "test", err, sizeof err);
        int set_refused = rc != 0;  // a value refused by itself leaves the config as it was
        if (!rc) rc = config_validate_checked(&c, "test", err, sizeof err);  // the keys against each other
        int ok = rc == -1 && strstr(err, bad[i].want) && (!set_refused || !memcmp(&c, &before, sizeof c));
        refused += ok;
        if (!ok && !*why) snprintf(why, sizeof why, "; '%.40s': %s", bad[i].kv, rc ? err : "accepted");
    }
    Config c;
    config_defaults(&c);
    config_load(&c, "configs/tiny/starter.conf");
    config_set(&c, "recompute=1", "test");
    int edge = config_set_checked(&c, "keep_blocks=2", "test", err, sizeof err) == 0 && c.keep_blocks == 2 &&
               config_validate_checked(&c, "test", err, sizeof err) == 0;
    // the largest slot offset, 10^6, is taken (both signs), and its slot holds exactly that offset
    config_defaults(&c);
    config_load(&c, "configs/tiny/starter.conf");
    char err2[512] = "";
    int edge_offset = config_set_checked(&c, "plan=anchor:0 context:-1000000 target:1000000", "test", err2,
                                         sizeof err2) == 0 &&
                      config_validate_checked(&c, "test", err2, sizeof err2) == 0 && c.slots == 3 &&
                      c.slot_offset[1] == -1e6f && c.slot_offset[2] == 1e6f;
    // -0, and a negative underflowing to it, read as 0 (printed back as "0", not "-0")
    config_defaults(&c);
    int plus_zero = config_set_checked(&c, "lr=-0", "test", err2, sizeof err2) == 0 && c.lr == 0 && !signbit(c.lr) &&
                    config_set_checked(&c, "weight_decay=-1e-400", "test", err2, sizeof err2) == 0 &&
                    !signbit(c.weight_decay);
    edge = edge && plus_zero;
    check(refused == n && edge && edge_offset, "config_refusals", "%d of %d bad values refused with their line (a "
          "value bad by itself leaving the config unchanged); keep_blocks = depth (2) and -0 as 0 %s; plan offsets +-10^6 "
          "%s%s%s",
          refused, n, edge ? "accepted" : "REFUSED", edge_offset ? "accepted" : "REFUSED: ", edge_offset ? "" : err2,
          why);
}

// A config file's comments: '#' at a line's start or after a space or tab starts one; a '#' inside a
// value stays in it (a path with one is then refused by its key, never cut short to another path).
static void test_config_comments(void) {
    static const char ok_text[] = "# a comment\nlr = 3e-4   # after a space\nseed = 7\t# after a tab\n";
    static const char path_text[] = "preview_data = /tmp/a#b\n";
    Config c;
    config_defaults(&c);
    char err[512] = "";
    int ok = config_parse_text(&c, ok_text, sizeof ok_text - 1, "test.conf", err, sizeof err) == 0 && c.lr == 3e-4 &&
             c.seed == 7;
    config_defaults(&c);
    char err2[512] = "";
    int refused = config_parse_text(&c, path_text, sizeof path_text - 1, "test.conf", err2, sizeof err2) != 0 &&
                  strstr(err2, "/tmp/a#b") && !c.preview_data[0];
    check(ok && refused, "config_comments", "comments after a space and a tab: %s; a value with '#' in it: %s",
          ok ? "read" : err, refused ? err2 : "cut short and taken");
}

// A config's lines end at LF, CRLF or a CR alone (an old Mac editor's): the same keys read each way, and
// an error names the line it is on. With CR alone the first '#' line had taken the whole file as one
// comment ("sets no key").
static void test_config_line_endings(void) {
    static const char *const ends[] = {"\n", "\r\n", "\r"};
    int same = 1;
    char err[512] = "";
    for (int e = 0; e < 3; e++) {
        char text[256];
        snprintf(text, sizeof text, "# a comment%slr = 3e-4%s%sseed = 7%s", ends[e], ends[e], ends[e], ends[e]);
        Config c;
        config_defaults(&c);
        same &= config_parse_text(&c, text, strlen(text), "test.conf", err, sizeof err) == 0 && c.lr == 3e-4 &&
                c.seed == 7;
    }
    static const char bad[] = "# one\rlr = 3e-4\r\rwidth = x\r";
    Config c;
    config_defaults(&c);
    char err2[512] = "";
    int named = config_parse_text(&c, bad, sizeof bad - 1, "test.conf", err2, sizeof err2) != 0 &&
                !strncmp(err2, "test.conf:4: width", 18);
    check(same && named, "config_line_endings", "LF, CRLF and CR: %s; a bad value on line 4 of a CR file: %s",
          same ? "the same keys" : err, err2);
}

// An error line built by fc_errf stays one printable line whatever a file's name holds: no line break
// (a second line) and no control character (an escape sequence that recolours the terminal).
static void test_error_lines_printable(void) {
    char err[256];
    fc_errf(err, sizeof err, "%s: cannot open", "in/bad\nline\033[31mred\r\t\x7f.mp4");
    int controls = 0;
    for (const unsigned char *p = (const unsigned char *)err; *p; p++) controls += *p < 0x20 || *p == 0x7f;
    check(!controls && !strcmp(err, "in/bad line?[31mred  ?.mp4: cannot open"), "error_line_printable",
          "a name with a newline, an ESC, a CR, a tab and a DEL: '%s' (%d control characters)", err, controls);
}

// Beyond ASCII: printable characters of any language stay as they are; a C1 control (U+0080-U+009F:
// its UTF-8 is C2 80 .. C2 9F, U+009B the CSI that some terminals obey like ESC [) becomes one '?', and
// each byte that is not part of valid UTF-8 (a lone 0x9b, a sequence cut short, an overlong form, a
// surrogate, beyond U+10FFFF) a '?' of its own. The string never grows.
static void test_error_lines_utf8(void) {
    static const struct {
        const char *name, *in, *want;
    } cases[] = {
        {"languages", "caf\xc3\xa9 \xc3\xbc \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\xa5 \xc2\xa0nbsp",
         "caf\xc3\xa9 \xc3\xbc \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\xa5 \xc2\xa0nbsp"},
        {"c1_csi", "a\xc2\x9b" "31mb", "a?31mb"},
        {"c1_nel_and_first", "a\xc2\x85" "b\xc2\x80" "c\xc2\x9f", "a?b?c?"},
        {"lone_8bit_csi", "a\x9b" "31mb", "a?31mb"},
        {"lone_bytes", "\x80\xbf\xfe\xff\xf5", "?????"},
        {"cut_short", "x\xe6\x97", "x??"},
        {"cut_short_inside", "\xe6\x97x\xf0\x9f\x8e", "??x???"},
        {"lead_then_c1_byte", "\xe6\x9b" "a", "??a"},
        {"overlong", "\xc0\xaf\xc1\xbf\xe0\x80\xaf\xf0\x80\x80\xaf", "???????????"},
        {"surrogate", "\xed\xa0\x80", "???"},
        {"beyond_10ffff", "\xf4\x90\x80\x80", "????"},
        {"c2_cut_short", "ok\xc2", "ok?"},
        // the invisible controls that reorder or break the text after them: each one '?'
        {"bidi_override", "a\xe2\x80\xaegpm.exe", "a?gpm.exe"},
        {"bidi_embed_pop", "\xe2\x80\xaa" "a\xe2\x80\xab" "b\xe2\x80\xac" "c\xe2\x80\xad", "?a?b?c?"},
        {"bidi_isolates", "\xe2\x81\xa6" "a\xe2\x81\xa7" "b\xe2\x81\xa8" "c\xe2\x81\xa9", "?a?b?c?"},
        {"line_para_separators", "a\xe2\x80\xa8" "b\xe2\x80\xa9" "c", "a?b?c"},
        {"bidi_neighbours_kept", "\xe2\x80\xa7\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa",
         "\xe2\x80\xa7\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa"},
        {"bidi_cut_short", "a\xe2\x80", "a??"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[64], name[64];
        snprintf(buf, sizeof buf, "%s", cases[i].in);
        fc_printable_line(buf);
        snprintf(name, sizeof name, "error_line_utf8_%s", cases[i].name);
        check(!strcmp(buf, cases[i].want) && strlen(buf) <= strlen(cases[i].in), name, "%zu bytes in, '%s' out",
              strlen(cases[i].in), buf);
    }
    // through fc_errf, and through the line fc_warn writes (a C1 control shortens it: the newline
    // still ends it, right after the text)
    char err[64];
    fc_errf(err, sizeof err, "%s: cannot open", "in/\xc2\x9b" "31m\x9b" "0m\xc3\xa9.mp4");
    check(!strcmp(err, "in/?31m?0m\xc3\xa9.mp4: cannot open"), "error_line_utf8_errf", "'%s'", err);
    char path[] = "/tmp/fc_test_base_warn_XXXXXX";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    char got[256] = "";
    if (fd >= 0 && saved >= 0) {
        fflush(stderr);
        dup2(fd, STDERR_FILENO);
        fc_warn("%s: \xc2\x9b\xc2\x9b" "31m is a name", "v\xc3\xa9.mp4");
        dup2(saved, STDERR_FILENO);
        ssize_t n = pread(fd, got, sizeof got - 1, 0);
        got[n > 0 ? n : 0] = 0;
    }
    if (fd >= 0) close(fd), unlink(path);
    if (saved >= 0) close(saved);
    check(!strcmp(got, "framechain: warning: v\xc3\xa9.mp4: ??31m is a name\n"), "error_line_utf8_warn_line",
          "stderr held '%.*s' and %s", (int)strcspn(got, "\n"), got, strchr(got, '\n') ? "a newline" : "no newline");
}

// A name as a summary line or a file's comment prints it (fc_escaped_name): one line whatever it
// holds, names in any language as they are, cut between characters where the buffer is short.
static void test_escaped_name(void) {
    char out[64];
    fc_escaped_name(out, sizeof out, "odd dir\nline2 \xff\tcaf\xc3\xa9\xc2\x9b" "1\x1b");
    check(!strcmp(out, "odd dir\\nline2 \\xff\\tcaf\xc3\xa9\\xc2\\x9b" "1\\x1b"), "escaped_name",
          "'%s'", out);
    char small[7];
    fc_escaped_name(small, sizeof small, "ab\xe6\x97\xa5\n");  // the newline's escape does not fit whole
    check(!strcmp(small, "ab\xe6\x97\xa5"), "escaped_name_cut", "'%s'", small);
}

// The line fc_warn writes for "%s", text, into got (len bytes).
static void warn_line(const char *text, char *got, size_t len) {
    char path[] = "/tmp/fc_test_base_origin_XXXXXX";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    got[0] = 0;
    if (fd >= 0 && saved >= 0) {
        fflush(stderr);
        dup2(fd, STDERR_FILENO);
        fc_warn("%s", text);
        dup2(saved, STDERR_FILENO);
        ssize_t n = pread(fd, got, len - 1, 0);
        got[n > 0 ? n : 0] = 0;
    }
    if (fd >= 0) close(fd), unlink(path);
    if (saved >= 0) close(saved);
}

// A machine's first rank speaking for its others names the machine (fc_message_origin); unset, or
// set to "", the line is as it was.
static void test_error_lines_origin(void) {
    char got[256];
    fc_message_origin("node2: ");
    warn_line("/data/clips: no such folder", got, sizeof got);
    check(!strcmp(got, "framechain: warning: node2: /data/clips: no such folder\n"), "error_line_names_its_machine",
          "'%.*s'", (int)strcspn(got, "\n"), got);
    fc_message_origin("");
    warn_line("/data/clips: no such folder", got, sizeof got);
    fc_message_origin(NULL);
    char none[256];
    warn_line("/data/clips: no such folder", none, sizeof none);
    check(!strcmp(got, "framechain: warning: /data/clips: no such folder\n") && !strcmp(none, got),
          "error_line_without_origin", "'%.*s', '%.*s'", (int)strcspn(got, "\n"), got, (int)strcspn(none, "\n"), none);
}

int main(void) {
    fc_set_threads(fc_default_threads());
    test_error_lines_printable();
    test_error_lines_utf8();
    test_error_lines_origin();
    test_escaped_name();
    test_philox_kat();
    test_philox_layout();
    test_philox_distributions();
    test_config_roundtrip();
    test_config_refusals();
    test_config_comments();
    test_config_line_endings();
    return g_failed ? 1 : 0;
}
