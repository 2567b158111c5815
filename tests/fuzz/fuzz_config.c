// fuzz_config.c: libFuzzer target for the config reader. The bytes are parsed as a config file
// over the defaults: a refusal must leave the config unchanged and give one line naming the
// origin; an accepted, valid config must come back equal through config_write and a second parse.
// The same bytes, as one `--set` argument, must also never crash config_set_checked.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"

static void one_line_from(const char *err, const char *origin) {
    if (!err[0] || strchr(err, '\n') || strncmp(err, origin, strlen(origin))) {
        fprintf(stderr, "bad error message: '%s'\n", err);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Config a, b, before;
    char err[CONFIG_MAX_LINE + 512] = "";
    config_defaults(&a);
    before = a;
    if (config_parse_text(&a, (const char *)data, size, "fuzz", err, sizeof err)) {
        one_line_from(err, "fuzz:");
        if (!config_equal(&a, &before)) abort();
    } else if (config_validate_checked(&a, "fuzz", err, sizeof err) == 0) {
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        if (!mem) abort();
        config_write(&a, mem);
        fclose(mem);
        config_defaults(&b);
        if (config_parse_text(&b, text, len, "written", err, sizeof err)) {
            fprintf(stderr, "config_write's text does not parse: %s\n", err);
            abort();
        }
        if (!config_equal(&a, &b)) {
            fprintf(stderr, "config_write and back changed the config:\n%s", text);
            abort();
        }
        free(text);
    } else {
        one_line_from(err, "fuzz:");
    }

    // as one --set argument (up to the first NUL)
    char *arg = malloc(size + 1);
    if (!arg) return 0;
    memcpy(arg, data, size);
    arg[size] = 0;
    config_defaults(&a);
    if (config_set_checked(&a, arg, "--set", err, sizeof err)) {
        if (!err[0] || strncmp(err, "--set ", 6) || !config_equal(&a, &before)) abort();
    }
    free(arg);
    return 0;
}
