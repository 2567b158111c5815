// frame_folder.c: a folder's entries in order, and a folder of frames read as one clip (see
// frame_folder.h).
#define _GNU_SOURCE  // strverscmp
#include "dataset/frame_folder.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/common.h"
#include "video/video.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
// Names in natural order: the numbers in them compared as numbers, so frames named f1.png .. f12.png
// come in time order (strverscmp; zero-padded names keep their plain order).
static int cmp_natural(const void *a, const void *b) { return strverscmp(*(char *const *)a, *(char *const *)b); }

char **folder_entries(const char *dir, int *count, int natural) {
    DIR *d = opendir(dir);
    *count = 0;
    if (!d) return NULL;
    int cap = 64, n = 0;
    char **names = fc_malloc(sizeof(char *) * cap);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;  // ., .., hidden files
        if (n + 1 >= cap) {
            cap *= 2;
            names = realloc(names, sizeof(char *) * cap);
            if (!names) fc_die("out of host memory listing %s", dir);
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = fc_malloc(len);
        snprintf(names[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof(char *), natural ? cmp_natural : cmp_str);
    names[n] = NULL;
    *count = n;
    return names;
}

void folder_entries_free(char **list) {
    for (char **p = list; p && *p; p++) free(*p);
    free(list);
}

int has_extension(const char *path, const char *const *ext) {
    const char *base = strrchr(path, '/'), *dot;
    base = base ? base + 1 : path;
    dot = strrchr(base, '.');
    for (int i = 0; dot && dot != base && ext[i]; i++)
        if (!strcasecmp(dot, ext[i])) return 1;
    return 0;
}

int is_video_file(const char *path) {
    static const char *const ext[] = {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".ts",
                                      ".mts", ".m2ts", ".flv", ".wmv", ".asf", ".ogv", ".3gp", ".y4m", ".gif",
                                      ".mxf", ".vob", ".dv", ".nut", ".divx", ".rm", ".rmvb", NULL};
    return has_extension(path, ext);
}

struct FrameFolder {
    char **images;  // the PNG and JPEG files, in natural order of their names
    int n, next;
    int stopped, other_size;
    int w, h;       // the first frame's size as shown
    char msg[700];  // why the reading stopped, said again on every later call
};

FrameFolder *frame_folder_open(const char *dir, char *err, size_t errlen) {
    int n;
    char **list = folder_entries(dir, &n, 1);
    if (!list) {
        fc_errf(err, errlen, "%s: cannot read the folder: %s", dir, strerror(errno));
        return NULL;
    }
    FrameFolder *f = fc_calloc(1, sizeof *f);
    f->images = fc_malloc(sizeof(char *) * (n + 1));
    const char *video = NULL;
    for (int i = 0; i < n; i++) {
        if (is_image_path(list[i])) f->images[f->n++] = list[i];
        else if (!video && is_video_file(list[i])) video = list[i];
    }
    f->images[f->n] = NULL;
    if (video) fc_errf(err, errlen, "%s: holds a video (%s): a folder of frames holds PNG or JPEG images and no video; "
                       "give the video itself", dir, video);
    else if (!f->n) fc_errf(err, errlen, "%s: no PNG or JPEG frames in the folder", dir);
    for (int i = 0; i < n; i++)
        if (!is_image_path(list[i])) free(list[i]);
    free(list);  // the images' names now belong to f
    if (video || !f->n) {
        frame_folder_close(f);
        return NULL;
    }
    return f;
}

int frame_folder_images(const FrameFolder *f) { return f ? f->n : 0; }

// The last run of digits in path's file name: its value, and the name's parts before and after it
// (offsets into path). 0 where the name holds no digit.
static int name_number(const char *path, long long *value, size_t *start, size_t *end) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *e = NULL;
    for (const char *p = base; *p; p++)
        if (isdigit((unsigned char)*p)) e = p + 1;
    if (!e) return 0;
    const char *b = e;
    while (b > base && isdigit((unsigned char)b[-1])) b--;
    if (e - b > 17) return 0;  // past what a long long holds: no frame number
    *value = strtoll(b, NULL, 10), *start = (size_t)(b - path), *end = (size_t)(e - path);
    return 1;
}

int frame_folder_gaps(const FrameFolder *f, char *first, size_t len) {
    int gaps = 0;
    for (int i = 1; f && i < f->n; i++) {
        long long a, b;
        size_t sa, ea, sb, eb;
        const char *pa = f->images[i - 1], *pb = f->images[i];
        if (!name_number(pa, &a, &sa, &ea) || !name_number(pb, &b, &sb, &eb) || sa != sb ||
            strncmp(pa, pb, sa) || strcmp(pa + ea, pb + eb) || b - a <= 1)
            continue;
        if (!gaps++) {
            const char *na = strrchr(pa, '/'), *nb = strrchr(pb, '/');
            snprintf(first, len, "%s then %s", na ? na + 1 : pa, nb ? nb + 1 : pb);
        }
    }
    return gaps;
}

int frame_folder_next(FrameFolder *f, int size, uint8_t *rgb, char *err, size_t errlen) {
    if (f->stopped) return fc_errf(err, errlen, "%s", f->msg);
    if (f->next >= f->n) return 0;
    const char *path = f->images[f->next];
    char why[512];
    int w, h;
    if (image_load_square_size(path, size, rgb, &w, &h, why, sizeof why)) {
        snprintf(f->msg, sizeof f->msg, "stopped at a bad frame: %s", why);  // names the frame's file
        f->stopped = 1;
    } else if (f->next && (w != f->w || h != f->h)) {  // a thumbnail, a frame of another export: the framing jumps
        fc_errf(f->msg, sizeof f->msg, "stopped at a frame of another size: %s is %dx%d, unlike the %dx%d of %s, the "
                "first in name order", path, w, h, f->w, f->h, f->images[0]);
        f->stopped = f->other_size = 1;
    }
    if (f->stopped) return fc_errf(err, errlen, "%s", f->msg);
    if (!f->next) f->w = w, f->h = h;
    f->next++;
    return 1;
}

int frame_folder_stopped_at_other_size(const FrameFolder *f) { return f && f->other_size; }

void frame_folder_size(const FrameFolder *f, int *w, int *h) {
    *w = f && f->next ? f->w : 0;
    *h = f && f->next ? f->h : 0;
}

void frame_folder_close(FrameFolder *f) {
    if (!f) return;
    folder_entries_free(f->images);
    free(f);
}
