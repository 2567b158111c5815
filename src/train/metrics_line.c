// metrics_line.c: one line of metrics.jsonl read back (metrics_line.h).
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"
#include "train/metrics_line.h"

static const char *skip_ws(const char *s) {
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') s++;
    return s;
}

int metrics_line_read(const char *s, const char *const *keys, int nkeys, double *out, char *why, size_t whylen) {
    for (int k = 0; k < nkeys; k++) out[k] = NAN;
    int have_step = 0;
    double step = NAN;
    s = skip_ws(s);
    if (*s != '{') return fc_errf(why, whylen, "expected a JSON object ('{')");
    s = skip_ws(s + 1);
    if (*s == '}') s++;
    else
        for (;;) {
            if (*s != '"') return fc_errf(why, whylen, "expected a key in double quotes");
            char key[64];
            size_t kn = 0;
            for (s++; *s && *s != '"'; s++) {
                if (*s == '\\' && s[1]) s++;
                if (kn + 1 < sizeof key) key[kn++] = *s;
            }
            key[kn] = 0;
            if (*s != '"') return fc_errf(why, whylen, "a key without its closing quote");
            s = skip_ws(s + 1);
            if (*s != ':') return fc_errf(why, whylen, "expected ':' after \"%s\"", key);
            s = skip_ws(s + 1);
            int k = 0, is_step = !strcmp(key, "step"), known = is_step;
            while (k < nkeys && strcmp(key, keys[k])) k++;
            known |= k < nkeys;
            double v = NAN;
            if (*s == '"') {
                if (known) return fc_errf(why, whylen, "\"%s\" holds a string, not a number", key);
                for (s++; *s && *s != '"'; s++)
                    if (*s == '\\' && s[1]) s++;
                if (*s++ != '"') return fc_errf(why, whylen, "a string without its closing quote");
            } else if (*s == '{' || *s == '[') {
                return fc_errf(why, whylen, "\"%s\" holds an object or a list, not a number", key);
            } else if (!strncmp(s, "null", 4) || !strncmp(s, "true", 4) || !strncmp(s, "false", 5)) {
                if (known && *s != 'n') return fc_errf(why, whylen, "\"%s\" holds %.4s, not a number", key, s);
                s += *s == 'f' ? 5 : 4;
            } else {
                char *end;
                v = strtod(s, &end);
                if (end == s) return fc_errf(why, whylen, "\"%s\" holds no number", key);
                s = end;
            }
            if (k < nkeys) out[k] = v;
            if (is_step) step = v, have_step = 1;
            s = skip_ws(s);
            if (*s == '}') {
                s++;
                break;
            }
            if (*s != ',') return fc_errf(why, whylen, "expected ',' or '}' after the value of \"%s\"", key);
            s = skip_ws(s + 1);
        }
    if (*skip_ws(s)) return fc_errf(why, whylen, "text after the object's closing '}'");
    if (!have_step) return fc_errf(why, whylen, "no \"step\"");
    if (!(step >= 0 && step == floor(step))) return fc_errf(why, whylen, "\"step\" is not a whole number");
    if (step > INT_MAX) return fc_errf(why, whylen, "\"step\" %.0f is past the most a run has (%d)", step, INT_MAX);
    return 0;
}

int metrics_line_record(const char *line, size_t len, const char *const *keys, int nkeys, double *out, char *why,
                        size_t whylen) {
    if (memchr(line, 0, len)) {
        for (int k = 0; k < nkeys; k++) out[k] = NAN;
        return fc_errf(why, whylen, "a NUL byte in the line");
    }
    return metrics_line_read(line, keys, nkeys, out, why, whylen);
}
