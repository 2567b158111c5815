// paths.c: folders on disk (paths.h).
#include "base/paths.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/common.h"

int fc_mkdir_p(const char *dir, char *err, size_t errlen) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return fc_errf(err, errlen, "%.200s...: path too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0755) && errno != EEXIST)
                return fc_errf(err, errlen, "%s: cannot create folder: %s", p, strerror(errno));
            *s = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) return fc_errf(err, errlen, "%s: not a folder", dir);
    return 0;
}
