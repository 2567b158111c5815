// generate.c: a chain's frames written to a video or a folder of PNGs as they come (see generate.h).
#define _GNU_SOURCE  // renameat2
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "base/paths.h"
#include "video/video.h"
#include "chain/sampler.h"
#include "chain/generate.h"

#define PATH_LEN 4200

static int has_extension(const char *path, const char *const *ext, size_t n) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return 0;
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(dot, ext[i])) return 1;
    return 0;
}

// The containers written (video_writer_open).
static int is_video_path(const char *path) {
    static const char *const ext[] = {".mp4", ".m4v", ".mov", ".mkv", ".avi", ".gif"};
    return has_extension(path, ext, sizeof ext / sizeof ext[0]);
}

int generate_is_video_path(const char *out) { return is_video_path(out); }

// Video extensions that are not written: such a name would get a folder of PNGs, surely not what was
// meant, so it is refused.
static int is_unwritten_video_path(const char *path) {
    static const char *const ext[] = {".webm", ".mpg", ".mpeg", ".ts", ".mts", ".m2ts", ".flv", ".wmv", ".asf",
                                      ".ogv", ".ogg", ".3gp", ".vob", ".y4m", ".webp", ".apng", ".mjpeg", ".mjpg",
                                      ".mxf", ".h264", ".264", ".h265", ".265", ".hevc", ".m2v", ".m1v", ".yuv",
                                      ".nut", ".dv", ".f4v", ".rm", ".rmvb", ".divx", ".mk3d", ".ivf", ".obu"};
    return has_extension(path, ext, sizeof ext / sizeof ext[0]);
}

// A still image's name: the output would be a folder of frames under it, surely not what was meant.
static int is_still_path(const char *path) {
    static const char *const ext[] = {".png", ".jpg", ".jpeg", ".jfif", ".jpe", ".bmp", ".tif", ".tiff", ".tga",
                                      ".ppm", ".pgm", ".pbm", ".pnm", ".pam", ".exr", ".heic", ".avif", ".jxl",
                                      ".jp2", ".dds", ".psd", ".xpm", ".ico"};
    return has_extension(path, ext, sizeof ext / sizeof ext[0]);
}

int generate_is_still_path(const char *path) { return is_still_path(path); }

// out without trailing slashes ("frames/" is the folder frames). -1 when nothing is left of it.
static int clean_path(char *dst, const char *out) {
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/') n--;
    if (n == 0 || n >= PATH_LEN) return -1;
    memcpy(dst, out, n), dst[n] = 0;
    return 0;
}

static int is_frame_name(const char *name) {
    int n = 0;
    return sscanf(name, "frame-%*6[0-9].png%n", &n) == 0 && n == 16 && name[n] == 0;
}

static void png_name(char *name, size_t size, const char *dir, int f) {
    snprintf(name, size, "%s/frame-%06d.png", dir, f);
}

// Remove a folder of frame PNGs (one generate made: nothing else is in it) and the folder. A symbolic
// link there (an --out that was one, swapped aside) goes itself: the frames it points to are not ours.
static void remove_frame_folder(const char *dir) {
    struct stat sb;
    if (!lstat(dir, &sb) && S_ISLNK(sb.st_mode)) {
        unlink(dir);
        return;
    }
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char name[PATH_LEN + 300];
        while ((e = readdir(d)))
            if (is_frame_name(e->d_name)) snprintf(name, sizeof name, "%s/%s", dir, e->d_name), unlink(name);
        closedir(d);
    }
    rmdir(dir);
}

// ----------------------------------------------------------------------------
// the checks before sampling

static void remove_leftovers(const char *out);

// An existing folder that --overwrite may replace: nothing in it but frame PNGs. 0, or -1 with err.
static int check_replaceable_folder(const char *out, char *err, size_t errlen) {
    DIR *d = opendir(out);
    if (!d) return fc_errf(err, errlen, "%s: cannot read the folder: %s", out, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && !is_frame_name(e->d_name))
            rc = fc_errf(err, errlen, "%s: holds %s, not only frame-NNNNNN.png; --overwrite replaces only a folder of "
                         "frames generate wrote", out, e->d_name);
    closedir(d);
    return rc;
}

int generate_check_output(const char *out_arg, const char *input, const char *vae, int overwrite, char *err,
                          size_t errlen) {
    char out[PATH_LEN], dir[PATH_LEN];
    if (clean_path(out, out_arg)) return fc_errf(err, errlen, "--out '%s': not a usable path", out_arg);
    int video = is_video_path(out);
    size_t n = strlen(out_arg);
    if (video && n && out_arg[n - 1] == '/')  // a folder by its slash, a video file by its extension
        return fc_errf(err, errlen, "--out %s: the '/' at its end names a folder, but %s names a video file: give %s "
                       "for the video, or a folder name without an extension for PNG frames", out_arg,
                       strrchr(out, '.'), out);
    if (is_unwritten_video_path(out))
        return fc_errf(err, errlen, "%s: %s is not a format written here; give .mp4, .m4v, .mov, .mkv, .avi or .gif "
                       "for a video, or a name without a video extension for a folder of PNGs", out, strrchr(out, '.'));
    if (is_still_path(out))
        return fc_errf(err, errlen, "%s: %s names one image; the output is a video (.mp4, .gif, ...) or a folder "
                       "of frame-NNNNNN.png files: give a folder name without an extension", out,
                       strrchr(out, '.'));
    struct stat sd, so, si, sp;
    if (fc_check_output_folder(out, out, dir, PATH_LEN, &sd, err, errlen)) return -1;
    // a umask that takes its owner's own access (477, 777) makes a temporary video this process cannot
    // read back (the MP4's faststart, the fsync) or a folder of frames it cannot write into: said now,
    // not after the sampling (root reads and writes whatever the modes)
    mode_t mask = umask(0);
    umask(mask);
    if ((mask & 0700) && geteuid() != 0)
        return fc_errf(err, errlen, "%s: the umask %04o takes from its owner the access generate needs to its own "
                       "output (the video read back, the frames written into their folder): set a umask such as 022 "
                       "or 077", out, (unsigned)mask);
    remove_leftovers(out);  // first: an output a cut-off generate had moved aside is back before the checks
    if (stat(out, &so)) {
        if (errno != ENOENT) return fc_errf(err, errlen, "%s: %s", out, strerror(errno));
        if (!lstat(out, &so))  // a link whose target is not there: the output could not be renamed onto it
            return fc_errf(err, errlen, "%s: a symbolic link to nothing; remove it or give another name", out);
        return 0;
    }
    // "." and ".." name a folder that cannot be renamed: the new frames could never take its place
    const char *slash = strrchr(out, '/'), *base = slash ? slash + 1 : out;
    if (S_ISDIR(so.st_mode) && (!strcmp(base, ".") || !strcmp(base, ".."))) {
        char real[PATH_MAX];
        return fc_errf(err, errlen, "%s: names the folder by '%s', under which it cannot be replaced (the new frames "
                       "are renamed onto the name); give its own name, %s", out, base,
                       realpath(out, real) ? real : "from its parent folder");
    }
    // the autoencoder this command decodes with (--vae) is read as the input is: never replaced
    struct stat sv;
    if (vae && !stat(vae, &sv) && so.st_dev == sv.st_dev && so.st_ino == sv.st_ino)
        return fc_errf(err, errlen, "%s: is the autoencoder file this command reads (--vae %s); give the output another "
                       "name (--overwrite never replaces what the command reads)", out, vae);
    int have_input = input && !stat(input, &si);
    const char *kind = have_input && S_ISDIR(si.st_mode) ? "folder" : "file";  // a folder of frames, or a file
    if (have_input && so.st_dev == si.st_dev && so.st_ino == si.st_ino)
        return fc_errf(err, errlen, "%s: is the input %s %s; give the output another name (--overwrite "
                       "never replaces the input)", out, kind, input);
    // (said before --overwrite is asked for) a video is renamed onto its name too: through a link that
    // would replace the link (/dev/stdout's, a latest.mp4 pointing at a take), not the file it points to
    if (video && !lstat(out, &sp) && S_ISLNK(sp.st_mode)) {
        char real[PATH_MAX];
        return fc_errf(err, errlen, "%s: is a symbolic link to the file %s; --overwrite replaces a video only by its "
                       "own name: give that file, or remove the link", out, realpath(out, real) ? real : "it names");
    }
    if (!overwrite)
        return fc_errf(err, errlen, "%s: already exists%s; give a new name, or --overwrite to replace it", out,
                       S_ISDIR(so.st_mode) ? " (a folder)" : "");
    if (video && !S_ISREG(so.st_mode))
        return fc_errf(err, errlen, "%s: exists and is not a file; --overwrite replaces only a file by a video", out);
    if (!video && !S_ISDIR(so.st_mode))
        return fc_errf(err, errlen, "%s: exists and is not a folder; without a video extension (.mp4, .gif, ...) the "
                       "output is a folder of PNGs, and --overwrite replaces only such a folder", out);
    // a folder is replaced by renaming the new one onto its name: through a link that would replace the
    // link, not the frames it points to, which is neither meaning of the command
    if (!video && !lstat(out, &sp) && S_ISLNK(sp.st_mode)) {
        char real[PATH_MAX];
        return fc_errf(err, errlen, "%s: is a symbolic link to the folder %s; --overwrite replaces a folder of frames "
                       "only by its own name: give that folder, or remove the link", out,
                       realpath(out, real) ? real : "it names");
    }
    // in a folder with the sticky bit (/tmp) the new output could not take another user's name
    if (fc_check_replaceable(out, &sd, &so, err, errlen)) return -1;
    // a mount point cannot be renamed either (a btrfs subvolume, on a device of its own too, can)
    if (!video && sd.st_dev != so.st_dev && fc_is_mount_point(out))
        return fc_errf(err, errlen, "%s: is a mount point, which cannot be renamed; --overwrite replaces a folder of "
                       "frames by renaming the new one onto its name: give a folder inside it", out);
    // the old frames are removed once the new folder has their name: from a folder that cannot be written
    // they would stay, beside it under the temporary name
    if (!video && access(out, W_OK | X_OK))
        return fc_errf(err, errlen, "%s: cannot remove its frames to replace them: %s; make it writable (chmod u+w) or "
                       "give another name", out, strerror(errno));
    if (!video && have_input) {  // the folder replaced must not hold the input (a link's target included)
        char in_dir[PATH_LEN], real[PATH_MAX];
        fc_folder_of(in_dir, PATH_LEN, realpath(input, real) ? real : input);
        if (!stat(in_dir, &sp) && sp.st_dev == so.st_dev && sp.st_ino == so.st_ino)
            return fc_errf(err, errlen, "%s: holds the input %s %s; give the output another name "
                           "(--overwrite never replaces the input)", out, kind, input);
    }
    return video ? 0 : check_replaceable_folder(out, err, errlen);
}

// ----------------------------------------------------------------------------
// writing

struct GenerateOutput {
    char out[PATH_LEN], tmp[PATH_LEN];  // the user's path, and the temporary name written first
    int video, overwrite, S, frames;    // frames written so far
    VideoWriter *vw;
    uint8_t *rgb;
};

// A message of the video writer, which names the temporary file, made to name the user's path.
static int name_user_path(const GenerateOutput *g, char *err, size_t errlen) {
    char quoted[sizeof g->tmp];  // the temporary's name as the error line quotes it (fc_printable_line)
    snprintf(quoted, sizeof quoted, "%s", g->tmp);
    fc_printable_line(quoted);
    size_t n = strlen(quoted);
    if (err && !strncmp(err, quoted, n) && err[n] == ':') {
        char rest[2048];
        snprintf(rest, sizeof rest, "%s", err + n);
        fc_errf(err, errlen, "%s%s", g->out, rest);
    }
    return -1;
}

// The most a temporary's tag adds to the name: ".replaced-PID", or ".partial-PID-" before a video's.
#define TEMP_TAG_LEN (10 + FC_PID_DIGITS)

// The base name of out's temporaries (fc_temp_base: shortened where the tag would pass NAME_MAX);
// a video's keeps its extension, which picks the container.
static void temp_base(char *dst, size_t len, const char *out) {
    const char *slash = strrchr(out, '/'), *base = slash ? slash + 1 : out, *dot = strrchr(base, '.');
    fc_temp_base(dst, len, base, TEMP_TAG_LEN, is_video_path(out) && dot ? strlen(dot) : 0);
}

// Whether `name` is base's temporary name for the process pid: 1 for "<base>.partial-PID" (a folder)
// or ".partial-PID-<base>" (a video), 2 for "<base>.replaced-PID" (a folder moved aside), else 0.
static int leftover_of(const char *name, const char *base, long *pid) {
    char *end;
    size_t n = strlen(base);
    if (!strncmp(name, ".partial-", 9)) {
        *pid = strtol(name + 9, &end, 10);
        return end > name + 9 && *end == '-' && !strcmp(end + 1, base);
    }
    if (strncmp(name, base, n)) return 0;
    const char *rest = name + n;
    int kind = !strncmp(rest, ".partial-", 9) ? 1 : !strncmp(rest, ".replaced-", 10) ? 2 : 0;
    if (!kind) return 0;
    const char *tag = rest + (kind == 1 ? 9 : 10);
    *pid = strtol(tag, &end, 10);
    return end > tag && !*end ? kind : 0;
}

// What a generate of the same --out that was cut off (Ctrl-C, kill, a power cut) left beside it:
// its temporary video or folder of frames, removed with a line. Those of a process still running
// are left alone.
static void remove_leftovers(const char *out) {
    char dir[PATH_LEN], path[2 * PATH_LEN], short_base[NAME_MAX + 1];
    fc_folder_of(dir, PATH_LEN, out);
    const char *slash = strrchr(out, '/'), *base = slash ? slash + 1 : out;
    temp_base(short_base, sizeof short_base, out);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid;
        int kind = leftover_of(e->d_name, base, &pid);
        if (!kind && strcmp(short_base, base)) kind = leftover_of(e->d_name, short_base, &pid);
        if (!kind || pid <= 0 || pid == getpid()) continue;
        if (!kill((pid_t)pid, 0) || errno != ESRCH) continue;  // its writer still runs
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb)) continue;
        // a folder moved aside for one that never took its place: the output it was, back in place
        if (S_ISDIR(sb.st_mode) && kind == 2 && lstat(out, &sb) && errno == ENOENT && !rename(path, out)) {
            printf("generate: restored %s from %s, where a generate of it that was cut off had moved it\n",
                   FC_ESCAPED(out), FC_ESCAPED(path));
            continue;
        }
        if (S_ISDIR(sb.st_mode)) remove_frame_folder(path);
        else unlink(path);
        if (lstat(path, &sb))
            printf("generate: removed %s, left by a generate of %s that was cut off\n", FC_ESCAPED(path), FC_ESCAPED(out));
        else
            printf("generate: %s is left by a generate of %s that was cut off; it could not be removed\n",
                   FC_ESCAPED(path), FC_ESCAPED(out));
    }
    closedir(d);
}

// The output being written, removed at exit where the command ends by a path that does not discard it
// (fc_die: out of memory in a pass, a check deep in the sampler): its help promises that an error
// removes the partial --out. One a process; finished or discarded, it is none.
static GenerateOutput *g_open_output;

static void remove_open_output(void) {
    GenerateOutput *g = g_open_output;
    if (!g) return;
    if (g->video) unlink(g->tmp);  // its writer's file descriptor goes with the process
    else remove_frame_folder(g->tmp);
}

GenerateOutput *generate_output_open(const char *out, int S, double fps, int overwrite, const char *comment, char *err,
                                     size_t errlen) {
    GenerateOutput *g = fc_calloc(1, sizeof *g);
    if (clean_path(g->out, out)) {
        fc_errf(err, errlen, "--out '%s': not a usable path", out);
        free(g);
        return NULL;
    }
    g->video = is_video_path(g->out), g->overwrite = overwrite, g->S = S;
    g->rgb = fc_malloc((size_t)S * S * 3);
    remove_leftovers(g->out);
    int ok;
    const char *slash = strrchr(g->out, '/'), *base = slash ? slash + 1 : g->out;
    char short_base[NAME_MAX + 1];
    temp_base(short_base, sizeof short_base, g->out);
    if (g->video) {  // the temporary name keeps the extension: it picks the container
        snprintf(g->tmp, sizeof g->tmp, "%.*s.partial-%d-%s", (int)(base - g->out), g->out, (int)getpid(), short_base);
        g->vw = video_writer_open(g->tmp, S, S, fps, comment, err, errlen);
        ok = g->vw != NULL;
        if (!ok) name_user_path(g, err, errlen);
    } else {
        snprintf(g->tmp, sizeof g->tmp, "%.*s%s.partial-%d", (int)(base - g->out), g->out, short_base, (int)getpid());
        ok = mkdir(g->tmp, 0777) == 0;
        if (!ok) fc_errf(err, errlen, "%s: cannot create a folder beside it (%s): %s", g->out, g->tmp, strerror(errno));
    }
    if (!ok) {
        unlink(g->tmp);  // a writer that failed after creating its file
        free(g->rgb), free(g);
        return NULL;
    }
    static int registered;
    if (!registered++) atexit(remove_open_output);
    g_open_output = g;
    return g;
}

int generate_output_add(GenerateOutput *g, const real *frame, char *err, size_t errlen) {
    frame_to_rgb(g->rgb, frame, g->S);
    if (g->video) {
        if (video_writer_add(g->vw, g->rgb, err, errlen)) return name_user_path(g, err, errlen);
    } else {
        char name[PATH_LEN + 32];
        png_name(name, sizeof name, g->tmp, g->frames);
        if (image_write_png(name, g->S, g->S, g->rgb))
            return fc_errf(err, errlen, "%s: cannot write frame-%06d.png: %s", g->out, g->frames,
                           errno ? strerror(errno) : "the PNG encoder failed");
    }
    g->frames++;
    return 0;
}

// The folder of PNGs into place; with overwrite the old folder of frames and the new one swap names
// in one step (--out names one of the two whole folders at every moment, a kill or a power cut
// between two renames would leave none), then the old one is removed; where the file system cannot
// swap, the old folder is moved aside first (remove_leftovers puts it back if that is all that is
// left). 0, or -1 with errno.
// The folder that holds out, synced: the names just swapped made durable before the old frames go,
// so that a power cut never brings back the old folder's name with some of its frames removed.
static void sync_folder_of_out(const GenerateOutput *g) {
    char dir[PATH_LEN];
    fc_folder_of(dir, PATH_LEN, g->out);
    fc_fsync_path(dir);
}

static int place_folder(GenerateOutput *g) {
    struct stat sb;
    if (!g->overwrite || lstat(g->out, &sb)) return fc_rename_new(g->tmp, g->out);
#ifdef RENAME_EXCHANGE
    if (!renameat2(AT_FDCWD, g->tmp, AT_FDCWD, g->out, RENAME_EXCHANGE)) {
        sync_folder_of_out(g);
        remove_frame_folder(g->tmp);  // the old frames, under the temporary name
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS) return -1;
#endif
    char old[PATH_LEN + 32], short_base[NAME_MAX + 1];
    const char *slash = strrchr(g->out, '/'), *base = slash ? slash + 1 : g->out;
    temp_base(short_base, sizeof short_base, g->out);
    snprintf(old, sizeof old, "%.*s%s.replaced-%d", (int)(base - g->out), g->out, short_base, (int)getpid());
    if (fc_rename_new(g->out, old)) return -1;
    if (fc_rename_new(g->tmp, g->out)) {
        int e = errno;
        rename(old, g->out);
        return errno = e, -1;
    }
    sync_folder_of_out(g);
    remove_frame_folder(old);
    return 0;
}

int generate_output_finish(GenerateOutput *g, char *err, size_t errlen) {
    int rc = 0;
    // a file or folder replaced keeps its permissions (a user's chmod 600 is not widened to the umask's),
    // given once the new one is whole and flushed: closing an MP4 reads it back (faststart) and the
    // fsync opens it, which a chmod 000 or 200 copied before made fail after all the sampling
    if (g->video) {  // fc_place_output gives a file its mode
        rc = video_writer_close(g->vw, err, errlen) ? name_user_path(g, err, errlen) : 0;
        g->vw = NULL;
        if (rc == 0 && fc_fsync_path(g->tmp))
            rc = fc_errf(err, errlen, "%s: cannot flush it to disk: %s", g->out, strerror(errno));
        if (rc == 0 && fc_place_output(g->tmp, g->out, g->overwrite))
            rc = fc_errf(err, errlen, "%s: cannot rename %s into place: %s", g->out, g->tmp, strerror(errno));
    } else {
        struct stat old;
        if (fc_fsync_path(g->tmp))
            rc = fc_errf(err, errlen, "%s: cannot flush the folder to disk: %s", g->out, strerror(errno));
        if (rc == 0 && g->overwrite && !stat(g->out, &old)) chmod(g->tmp, old.st_mode & 0777);
        if (rc == 0 && place_folder(g))
            rc = fc_errf(err, errlen, "%s: cannot rename %s into place: %s", g->out, g->tmp, strerror(errno));
    }
    if (rc) {
        generate_output_discard(g);
        return -1;
    }
    if (g_open_output == g) g_open_output = NULL;
    sync_folder_of_out(g);  // the rename itself to disk; not every file system syncs a folder
    free(g->rgb), free(g);
    return 0;
}

void generate_output_discard(GenerateOutput *g) {
    if (!g) return;
    if (g_open_output == g) g_open_output = NULL;
    if (g->vw) {
        char ignored[512];
        video_writer_close(g->vw, ignored, sizeof ignored);
    }
    if (g->video) unlink(g->tmp);
    else remove_frame_folder(g->tmp);
    free(g->rgb), free(g);
}
