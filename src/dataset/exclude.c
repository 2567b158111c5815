// exclude.c: reading and writing lists of excluded clips (see exclude.h).
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/exclude.h"
#include "base/common.h"
#include "formats/safetensors.h"

// The first line score --exclude-out writes: the count, the dataset's folder and, last, which dataset
// it is (its dataset.json's CRC-32: the same wherever a copy of it lies), which the reader checks.
#define EXCLUDE_HEADER "# framechain exclude list:"
#define EXCLUDE_MADE_FOR "(dataset.json crc32 "

// The shards of d in order: each one's file name, first dataset clip and clip count.
typedef struct {
    const char *name;
    int first, clips;
} ShardRange;

static ShardRange *shard_ranges(const Dataset *d, int *n) {
    int nclips = dataset_clips(d), ns = 0;
    ShardRange *r = fc_calloc((size_t)dataset_shards(d) + 1, sizeof *r);
    for (int i = 0; i < nclips; i++) {
        ClipLocation loc;
        if (dataset_clip_location(d, i, &loc)) continue;
        if (!ns || strcmp(r[ns - 1].name, loc.shard)) r[ns++] = (ShardRange){loc.shard, i, 0};
        r[ns - 1].clips++;
    }
    *n = ns;
    return r;
}

static int cmp_range_name(const void *a, const void *b) {
    const ShardRange *x = *(const ShardRange *const *)a, *y = *(const ShardRange *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->first > y->first) - (x->first < y->first);
}

static int cmp_name_range(const void *key, const void *elem) {
    return strcmp(key, (*(const ShardRange *const *)elem)->name);
}

// r[0 .. n-1] by name: a list line finds its shard by binary search, not by a walk through every shard
// (a list of many lines on a dataset of many shards).
static const ShardRange **ranges_by_name(const ShardRange *r, int n) {
    const ShardRange **by_name = fc_malloc(sizeof *by_name * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) by_name[i] = &r[i];
    qsort(by_name, (size_t)n, sizeof *by_name, cmp_range_name);
    return by_name;
}

// The range of the shard named `name` (the first in dataset order, were one named twice), or NULL.
static const ShardRange *find_range(const ShardRange **by_name, int n, const char *name) {
    const ShardRange **at = bsearch(name, by_name, (size_t)n, sizeof *by_name, cmp_name_range);
    while (at && at > by_name && !strcmp(at[-1]->name, name)) at--;
    return at ? *at : NULL;
}

// The list opened (not waiting on a FIFO) and its size in sb: a descriptor, or -1 with err.
static int open_list(const char *path, struct stat *sb, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return fc_errf(err, errlen, "%s: cannot open the exclude list: %s", path, strerror(errno));
    if (fstat(fd, sb) || !S_ISREG(sb->st_mode) || (size_t)sb->st_size > EXCLUDE_MAX_BYTES) {
        close(fd);
        return fc_errf(err, errlen, "%s: the exclude list is not a regular file of at most %zu MiB", path,
                       EXCLUDE_MAX_BYTES >> 20);
    }
    return fd;
}

int exclude_list_check_file(const char *path, char *err, size_t errlen) {
    struct stat sb;
    int fd = open_list(path, &sb, err, errlen);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

// The whole file, NUL-terminated. NULL with err.
static char *read_text(const char *path, size_t *len, char *err, size_t errlen) {
    struct stat sb;
    int fd = open_list(path, &sb, err, errlen);
    if (fd < 0) return NULL;
    char *text = fc_malloc((size_t)sb.st_size + 1);
    size_t got = 0;
    ssize_t r = 1;
    while (got < (size_t)sb.st_size && (r = read(fd, text + got, (size_t)sb.st_size - got)) > 0) got += (size_t)r;
    close(fd);
    if (r < 0) {
        free(text);
        return fc_errf(err, errlen, "%s: read error: %s", path, strerror(errno)), NULL;
    }
    text[got] = 0;
    *len = got;
    return text;
}

int exclude_list_read(const Dataset *d, const char *path, uint8_t *mask, char *err, size_t errlen) {
    size_t len;
    char *text = read_text(path, &len, err, errlen);
    if (!text) return -1;
    int ns, nclips = dataset_clips(d), count = 0, rc = 0;
    ShardRange *r = shard_ranges(d, &ns);
    const ShardRange **by_name = ranges_by_name(r, ns);
    memset(mask, 0, (size_t)nclips);
    long lineno = 0;
    char *start = text;
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) start += 3;  // a UTF-8 byte order mark (Notepad's)
    for (char *line = start, *next; line && line < text + len && !rc; line = next) {
        lineno++;
        next = memchr(line, '\n', (size_t)(text + len - line));
        if (next) *next++ = 0;
        if (strlen(line) != (size_t)((next ? next - 1 : text + len) - line)) {
            rc = fc_errf(err, errlen, "%s:%ld: NUL byte in the line", path, lineno);
            break;
        }
        char shard[256], index[256], extra[2];
        while (*line == ' ' || *line == '\t' || *line == '\r') line++;
        // the header score writes names its dataset by dataset.json's CRC-32: another dataset's list
        // would name clips that exist here too (every dataset has a shard-00000), but not the ones scored
        const char *made_for = NULL;  // its last "(dataset.json crc32 ": the folder's name comes before it
        for (const char *at = line; !strncmp(line, EXCLUDE_HEADER, strlen(EXCLUDE_HEADER)) &&
                                    (at = strstr(at, EXCLUDE_MADE_FOR));
             at++)
            made_for = at;
        unsigned long want;
        if (made_for && sscanf(made_for + strlen(EXCLUDE_MADE_FOR), "%8lx)", &want) == 1 &&
            want != dataset_json_crc(d)) {
            rc = fc_errf(err, errlen, "%s:%ld: made for another dataset (its dataset.json's CRC-32 %08lx; %s's is "
                         "%08lx): score --exclude-out on this dataset makes its list (where the other holds the same "
                         "clips in the same places, take this line out)", path, lineno, want, dataset_dir(d),
                         (unsigned long)dataset_json_crc(d));
            break;
        }
        if (!*line || *line == '#') continue;
        int got = sscanf(line, "%255s %255s %1s", shard, index, extra);
        // the index as written, digits only: one past any clip count reads as such, not as a clamped long
        if (got != 2 || !index[0] || index[strspn(index, "0123456789")]) {
            rc = fc_errf(err, errlen, "%s:%ld: expected 'shard-NNNNN.safetensors K' (a shard and a clip index in it)",
                         path, lineno);
            break;
        }
        const ShardRange *in = find_range(by_name, ns, shard);
        const char *value = index + strspn(index, "0");  // leading zeros aside ("000" is 0)
        long k = strlen(value) <= 9 ? strtol(value, NULL, 10) : -1;  // (a shard holds at most a million clips)
        if (!in || k < 0 || k >= in->clips) {
            rc = fc_errf(err, errlen, "%s:%ld: %.255s %s: %s has no such clip (a list made for another dataset?)", path,
                         lineno, shard, index, dataset_dir(d));
            break;
        }
        int clip = in->first + (int)k;
        count += !mask[clip];
        mask[clip] = 1;
    }
    if (!rc && count == nclips)
        rc = fc_errf(err, errlen, "%s: excludes every one of the %d clips of %s: nothing would be left to train on",
                     path, nclips, dataset_dir(d));
    free(by_name), free(r), free(text);
    return rc ? -1 : count;
}

char *exclude_list_text(const Dataset *d, const int *clips, int n, size_t *len, char *err, size_t errlen) {
    // the folder's name escaped: a newline in it would end the comment and start a line the reader refuses
    size_t dirlen = 4 * strlen(dataset_dir(d)) + 1, cap = 256 + (size_t)n * 64 + dirlen, used = 0;
    char *text = fc_malloc(cap), *dir = fc_escaped_name(fc_malloc(dirlen), dirlen, dataset_dir(d));
    used += (size_t)snprintf(text, cap, EXCLUDE_HEADER " %d of the %d clips of %s " EXCLUDE_MADE_FOR "%08lx)\n", n,
                             dataset_clips(d), dir, (unsigned long)dataset_json_crc(d));
    free(dir);
    for (int i = 0; i < n && used < cap; i++) {
        ClipLocation loc;
        if (dataset_clip_location(d, clips[i], &loc)) {
            free(text);
            fc_errf(err, errlen, "%s: clip %d: no such clip", dataset_dir(d), clips[i]);
            return NULL;
        }
        used += (size_t)snprintf(text + used, cap - used, "%s %d\n", loc.shard, loc.index);
    }
    *len = used;
    return text;
}

int exclude_list_write(const Dataset *d, const char *path, const int *clips, int n, int overwrite, char *err,
                       size_t errlen) {
    size_t len;
    char *text = exclude_list_text(d, clips, n, &len, err, errlen);
    if (!text) return -1;
    int rc = st_write_output(path, text, len, overwrite, err, errlen);
    free(text);
    return rc;
}
