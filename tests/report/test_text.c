// test_text.c: the text of plots (src/report/plot.c) in the ASCII bitmap font: a UTF-8 character (a
// run folder named in another language, a path in a title) is one glyph, '?', as wide as one; a byte
// that is no part of a whole sequence is a '?' of its own; text cut to a width never cuts a sequence.
#include <string.h>

#include "check.h"
#include "report/plot.h"

// Whether a and b draw the same pixels on canvases of the same size.
static int same_drawing(const char *a, const char *b) {
    Canvas ca, cb;
    char err[256];
    if (canvas_init(&ca, 120, 20, err, sizeof err) || canvas_init(&cb, 120, 20, err, sizeof err)) return 0;
    canvas_text(&ca, 2, 2, a, RGB_BLACK, 1);
    canvas_text(&cb, 2, 2, b, RGB_BLACK, 1);
    int same = !memcmp(ca.px, cb.px, (size_t)ca.w * ca.h * 3);
    canvas_free(&ca), canvas_free(&cb);
    return same;
}

// Whether s is whole UTF-8 (every lead byte followed by its continuation bytes).
static int whole_utf8(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 : (*p & 0xf8) == 0xf0 ? 4 : 0;
        if (!n) return 0;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xc0) != 0x80) return 0;
        p += n;
    }
    return 1;
}

int main(void) {
    struct {
        const char *text, *drawn;
    } cases[] = {
        {"vid\xc3\xa9o", "vid?o"},                     // e acute: two bytes, one glyph
        {"\xe6\x97\xa5\xe6\x9c\xac run", "?? run"},    // two CJK characters of three bytes
        {"a\xf0\x9f\x8e\xa5z", "a?z"},                  // an emoji of four bytes
        {"x\xffy", "x?y"},                              // a byte that begins nothing
        {"\xc3z", "?z"},                                // a lead byte without its continuation
        {"\x80\x80", "??"},                             // continuation bytes alone
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "text_utf8_case_%zu", i);
        int wa = text_width(cases[i].text, 2), wb = text_width(cases[i].drawn, 2);
        check(wa == wb && same_drawing(cases[i].text, cases[i].drawn), name, "width %d against %d of '%s'; %s", wa, wb,
              cases[i].drawn, same_drawing(cases[i].text, cases[i].drawn) ? "drawn alike" : "drawn otherwise");
    }

    // cut to a width: whole characters and "...", as wide as the same count of ASCII characters
    const char *long_name = "\xc3\xa9t\xc3\xa9-\xc3\xa9t\xc3\xa9-\xc3\xa9t\xc3\xa9";  // "ete-ete-ete", accented
    char fitted[128], ascii[128];
    int bad = 0, cut = 0;
    for (int maxw = 0; maxw <= text_width(long_name, 1) + 2; maxw++) {
        text_fit(fitted, sizeof fitted, long_name, maxw, 1);
        text_fit(ascii, sizeof ascii, "ete-ete-ete", maxw, 1);
        cut += strstr(fitted, "...") != NULL;
        bad += !whole_utf8(fitted) || text_width(fitted, 1) > maxw || text_width(fitted, 1) != text_width(ascii, 1);
    }
    check(bad == 0 && cut > 0, "text_fit_whole_characters", "%d widths cut to broken UTF-8, too wide, or unlike ASCII; %d cut",
          bad, cut);
    return g_failed ? 1 : 0;
}
