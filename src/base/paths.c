// paths.c: folders and files on disk (paths.h).
#define _GNU_SOURCE  // renameat2
#include "base/paths.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"

int fc_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd), e = errno;
    close(fd);
    errno = e;
    return rc;
}

int fc_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd), e = errno;
    if (close(fd) && rc == 0) return -1;
    errno = e;
    return rc;
}

int fc_getline_error(FILE *f) {
    if (feof(f) && !ferror(f)) return 0;
    return errno ? errno : EIO;
}

int fc_rename_new(const char *from, const char *to) {
#ifdef RENAME_NOREPLACE
    if (!renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE)) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -1;  // else a file system without it
#endif
    struct stat sb;
    if (!lstat(to, &sb)) return errno = EEXIST, -1;
    return rename(from, to);
}

int fc_place_output(const char *tmp, const char *path, int overwrite) {
    if (!overwrite) return fc_rename_new(tmp, path);
    struct stat old;
    if (!stat(path, &old) && S_ISREG(old.st_mode)) chmod(tmp, old.st_mode & 0777);  // not setuid on a data file
    return rename(tmp, path);
}

// fc_commit_file's steps; place: 0 a plain rename, 1 fc_place_output without overwrite, 2 with it
static int commit(FILE *f, const char *tmp, const char *path, int place) {
    int failed = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0, e = errno;
    if (fclose(f) && !failed) failed = 1, e = errno;
    if (!failed && (place ? fc_place_output(tmp, path, place == 2) : rename(tmp, path))) failed = 1, e = errno;
    if (!failed) {
        char dir[4096];
        fc_folder_of(dir, sizeof dir, path);
        fc_fsync_path(dir);  // the rename itself to disk; not every file system syncs a folder
        return 0;
    }
    unlink(tmp);
    if (!e) e = EIO;  // ferror without an errno of its own
    errno = e;
    return -1;
}

int fc_commit_file(FILE *f, const char *tmp, const char *path) { return commit(f, tmp, path, 0); }

int fc_commit_output(FILE *f, const char *tmp, const char *path, int overwrite) {
    return commit(f, tmp, path, overwrite ? 2 : 1);
}

int fc_output_error(char *err, size_t errlen, const char *path) {
    if (errno == EEXIST)
        return fc_errf(err, errlen, "%s: appeared while this command ran: not replaced (--overwrite replaces it)", path);
    return fc_errf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
}

int fc_fsync_parent(const char *dir) {
    char parent[4200];
    snprintf(parent, sizeof parent, "%s/..", dir);
    if (!fc_fsync_dir(parent)) return 0;
    return errno == EACCES || errno == EPERM ? 0 : -1;
}

int fc_path_not_folder(const char *path, char *err, size_t errlen) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        struct stat st, lst;
        int exists = !stat(p, &st), link = !lstat(p, &lst) && S_ISLNK(lst.st_mode);
        if ((exists && !S_ISDIR(st.st_mode)) || (!exists && link)) {
            char target[4096] = "";
            ssize_t n = link ? readlink(p, target, sizeof target - 1) : -1;
            target[n > 0 ? n : 0] = 0;
            const char *what = !exists                                           ? "a link to a path that does not exist"
                               : S_ISREG(st.st_mode)                             ? "a file"
                               : S_ISFIFO(st.st_mode)                            ? "a FIFO"
                               : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)      ? "a device"
                               : S_ISSOCK(st.st_mode)                            ? "a socket"
                                                                                 : "something else";
            if (!exists && n > 0)
                fc_errf(err, errlen, "%s: a link to %s, which does not exist%s%s", p, target, c ? ", in " : "",
                        c ? path : "");
            else
                fc_errf(err, errlen, "%s: %s, not a folder%s%s", p, what, c ? ", in " : "", c ? path : "");
            return 1;
        }
        if (!exists || !c) return 0;
        *s = c;
    }
}

int fc_mkdir_p(const char *dir, char *err, size_t errlen) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return fc_errf(err, errlen, "%.200s...: path too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0777)) {  // (the umask decides, as for every file: a group's 002 too)
                // a file where a folder goes, or a link to nowhere on the way (ENOENT)
                if ((errno == ENOTDIR || errno == ENOENT) && fc_path_not_folder(dir, err, errlen)) return -1;
                if (errno != EEXIST) return fc_errf(err, errlen, "%s: cannot create folder: %s", p, strerror(errno));
            } else if (fc_fsync_parent(p)) {  // a folder made here must outlive a power cut with what goes in it
                return fc_errf(err, errlen, "%s: fsync of the folder it is in failed: %s", p, strerror(errno));
            }
            *s = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(dir, &st) || !S_ISDIR(st.st_mode))
        return fc_path_not_folder(dir, err, errlen) ? -1 : fc_errf(err, errlen, "%s: not a folder", dir);
    return 0;
}

char *fc_missing_top(const char *dir) {
    struct stat st;
    if (!stat(dir, &st)) return NULL;
    char *p = strdup(dir);
    if (!p) fc_die("out of host memory");
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0;
    for (;;) {  // p does not exist: does its parent?
        size_t k = n;
        while (k > 0 && p[k - 1] != '/') k--;
        while (k > 1 && p[k - 1] == '/') k--;
        if (k == 0) return p;  // a relative name of one part
        char c = p[k];
        p[k] = 0;
        int there = !stat(p, &st);
        p[k] = c;
        if (there) return p;
        p[k] = 0, n = k;
    }
}

void fc_rmdir_made(const char *dir, const char *top) {
    char p[4096];  // no allocation: a signal handler calls this
    size_t t = strlen(top), n = strlen(dir);
    if (n >= sizeof p) return;
    memcpy(p, dir, n + 1);
    while (n > t && p[n - 1] == '/') p[--n] = 0;
    // a part that is not there (its mkdir failed: a name too long, no room) is passed over: the
    // parents made before it are still this command's
    for (; n >= t && (!rmdir(p) || errno == ENOENT || errno == ENAMETOOLONG) && n > t;) {
        while (n > t && p[n - 1] != '/') n--;
        while (n > t && p[n - 1] == '/') n--;
        p[n] = 0;
    }
}

// What a file that is not a regular one is, for the error line.
static const char *file_kind(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISDIR(m)) return "a folder";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a plain file";
}

// Close fd and return -1 with errno e (err already filled).
static int close_failed(int fd, int e) {
    close(fd);
    errno = e;
    return -1;
}

int fc_open_regular(const char *path, struct stat *st, char *err, size_t errlen) {
    struct stat own;
    if (!st) st = &own;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        fc_errf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        errno = e;
        return -1;
    }
    if (fstat(fd, st)) {
        fc_errf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        return close_failed(fd, errno);
    }
    if (!S_ISREG(st->st_mode)) {
        fc_errf(err, errlen, "%s: not a regular file (%s)", path, file_kind(st->st_mode));
        return close_failed(fd, EINVAL);
    }
    int flags = fcntl(fd, F_GETFL);  // reads block again, as on any file
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK)) {
        fc_errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return close_failed(fd, errno);
    }
    return fd;
}

FILE *fc_fopen_regular(const char *path, char *err, size_t errlen) {
    int fd = fc_open_regular(path, NULL, err, errlen);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        int e = errno;
        close(fd);
        fc_errf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        errno = e;
    }
    return f;
}

void fc_folder_of(char *dir, size_t len, const char *path) {
    snprintf(dir, len, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, len, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
}

void fc_temp_base(char *dst, size_t len, const char *base, size_t extra, size_t tail) {
    size_t n = strlen(base);
    if (n + extra <= NAME_MAX || len < 16) {
        snprintf(dst, len, "%s", base);
        return;
    }
    uint32_t h = 2166136261u;  // FNV-1a: names that share the kept prefix still get their own temporary
    for (const unsigned char *p = (const unsigned char *)base; *p; p++) h = (h ^ *p) * 16777619u;
    size_t room = NAME_MAX > extra + 9 ? NAME_MAX - extra - 9 : 0;  // 9: "~" and the hash
    if (room > len - 10) room = len - 10;
    if (tail > n || tail > room / 2) tail = 0;
    size_t keep = room - tail;
    if (keep > n - tail) keep = n - tail;
    while (keep > 0 && ((unsigned char)base[keep] & 0xC0) == 0x80) keep--;  // not inside a UTF-8 character
    snprintf(dst, len, "%.*s~%08x%s", (int)keep, base, (unsigned)h, base + n - tail);
}

int fc_temp_name(char *dst, size_t len, const char *path, const char *tag) {
    char short_base[NAME_MAX + 1];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    fc_temp_base(short_base, sizeof short_base, base, strlen(tag) + FC_PID_DIGITS, 0);
    int n = snprintf(dst, len, "%.*s%s%s%ld", (int)(base - path), path, short_base, tag, (long)getpid());
    return n >= 0 && (size_t)n < len ? 0 : -1;
}

int fc_remove_stale_temps(const char *path) {
    char dir[PATH_MAX], full[2 * PATH_MAX], short_base[NAME_MAX + 1];
    fc_folder_of(dir, sizeof dir, path);
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    fc_temp_base(short_base, sizeof short_base, base, strlen(".tmp-") + FC_PID_DIGITS, 0);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        // "BASE.tmp-PID", or the shortened base fc_temp_name makes for a long name
        size_t n = strlen(base);
        if (strncmp(e->d_name, base, n) || strncmp(e->d_name + n, ".tmp-", 5)) {
            n = strlen(short_base);
            if (strncmp(e->d_name, short_base, n) || strncmp(e->d_name + n, ".tmp-", 5)) continue;
        }
        long pid = strtol(e->d_name + n + 5, &end, 10);
        if (end == e->d_name + n + 5 || *end || pid <= 0 || pid == (long)getpid()) continue;
        if (!kill((pid_t)pid, 0) || errno != ESRCH) continue;  // its writer still runs
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(full, &sb) || !S_ISREG(sb.st_mode) || unlink(full)) continue;
        printf("removed %s, left by a write of %s that was cut off\n", FC_ESCAPED(full), FC_ESCAPED(path));
        removed++;
    }
    closedir(d);
    return removed;
}

int fc_can_create_beside(const char *path) {
    char probe[PATH_MAX];
    if (fc_temp_name(probe, sizeof probe, path, ".tmp-")) return ENAMETOOLONG;
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return errno == EEXIST ? 0 : errno;  // EEXIST: this process's own temporary file is there
    close(fd);
    unlink(probe);
    return 0;
}

int fc_is_mount_point(const char *path) {
    char real[PATH_MAX], line[3 * PATH_MAX];
    if (!realpath(path, real)) return 0;
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f) return -1;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        // "ID PARENT MAJ:MIN ROOT MOUNT_POINT ...": the fifth field, its space, tab, newline and backslash
        // written as \ooo
        char *p = line;
        for (int field = 0; field < 4 && p; field++) p = strchr(p, ' '), p = p ? p + 1 : NULL;
        if (!p) continue;
        char point[PATH_MAX];
        size_t n = 0;
        for (; *p && *p != ' ' && *p != '\n' && n + 1 < sizeof point; p++) {
            if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' && p[3] <= '7') {
                point[n++] = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
                p += 3;
            } else {
                point[n++] = *p;
            }
        }
        point[n] = 0;
        found = !strcmp(point, real);
    }
    fclose(f);
    return found;
}

static int sticky_keeps(const struct stat *folder, const struct stat *file) {
    return (folder->st_mode & S_ISVTX) && geteuid() != 0 && file->st_uid != geteuid() && folder->st_uid != geteuid();
}

int fc_check_output_folder(const char *shown, const char *path, char *dir, size_t dirlen, struct stat *sd, char *err,
                           size_t errlen) {
    fc_folder_of(dir, dirlen, path);
    if (stat(dir, sd))
        return errno == ENOENT ? fc_errf(err, errlen, "%s: the folder %s does not exist", shown, dir)
                               : fc_errf(err, errlen, "%s: the folder %s: %s", shown, dir, strerror(errno));
    if (!S_ISDIR(sd->st_mode)) return fc_errf(err, errlen, "%s: %s is not a folder", shown, dir);
    if (access(dir, W_OK | X_OK))
        return fc_errf(err, errlen, "%s: cannot write in the folder %s: %s", shown, dir, strerror(errno));
    fc_remove_stale_temps(path);  // a cut-off write's, or the probe below of a run cut off by a power cut
    int e = fc_can_create_beside(path);
    return e ? fc_errf(err, errlen, "%s: cannot make a file in the folder %s: %s", shown, dir, strerror(e)) : 0;
}

int fc_check_replaceable(const char *shown, const struct stat *folder, const struct stat *existing, char *err,
                         size_t errlen) {
    if (!sticky_keeps(folder, existing)) return 0;
    return fc_errf(err, errlen, "%s: belongs to another user (uid %u), in a folder with the sticky bit (as /tmp has), "
                   "where only its owner may replace it; give another name", shown, (unsigned)existing->st_uid);
}

int fc_check_output_file(const char *flag, const char *path, int replace, char *err, size_t errlen) {
    char dir[PATH_MAX], shown[PATH_MAX + 64];
    struct stat sd, sp;
    size_t n = strlen(path);
    if (!n || path[n - 1] == '/') return fc_errf(err, errlen, "%s '%s': a file name is needed", flag, path);
    snprintf(shown, sizeof shown, "%s %s", flag, path);
    if (fc_check_output_folder(shown, path, dir, sizeof dir, &sd, err, errlen)) return -1;
    if (lstat(path, &sp))  // a name the file system cannot hold is said now, not after the work
        return errno == ENAMETOOLONG ? fc_errf(err, errlen, "%s: %s", shown, strerror(errno)) : 0;
    if (S_ISDIR(sp.st_mode)) return fc_errf(err, errlen, "%s: is a folder; give a file name", shown);
    // The file is replaced by renaming a new one onto its name: a link would be replaced, not the file it
    // points to (/dev/stdout, a latest.png kept pointing at a run's), and a device, FIFO or socket by a file
    if (S_ISLNK(sp.st_mode)) {
        char real[PATH_MAX];
        if (!realpath(path, real)) {  // no name to resolve to: what the link says, for the user to see
            ssize_t k = readlink(path, real, sizeof real - 1);
            real[k > 0 ? k : 0] = 0;
            struct stat st;
            // a target that is there without a name (/dev/stdout on a pipe: /proc/self/fd/1 -> pipe:[N])
            if (!stat(path, &st))
                return fc_errf(err, errlen, "%s: is a symbolic link to %s (%s); a file is written only under its own "
                               "name: give a file name", shown, real, S_ISFIFO(st.st_mode) ? "a pipe"
                               : S_ISSOCK(st.st_mode) ? "a socket" : "which has no name to resolve to");
            return fc_errf(err, errlen, "%s: is a symbolic link to %s, which does not exist; remove the link or give "
                           "another name", shown, real);
        }
        return fc_errf(err, errlen, "%s: is a symbolic link to %s; a file is written only under its own name: give "
                       "that name, or remove the link", shown, real);
    }
    if (!S_ISREG(sp.st_mode))
        return fc_errf(err, errlen, "%s: exists and is not a file (a device, FIFO or socket); give a file name", shown);
    if (!replace) return fc_errf(err, errlen, "%s: the file exists (give --overwrite to replace it)", shown);
    return fc_check_replaceable(shown, &sd, &sp, err, errlen);  // the new file could not take its name
}

static int same_inode(const char *a, const char *b) {
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int fc_same_file_name(const char *a, const char *b) {
    const char *na = strrchr(a, '/'), *nb = strrchr(b, '/');
    if (strcmp(na ? na + 1 : a, nb ? nb + 1 : b)) return 0;
    char da[PATH_MAX], db[PATH_MAX], ra[PATH_MAX], rb[PATH_MAX];
    fc_folder_of(da, sizeof da, a), fc_folder_of(db, sizeof db, b);
    if (realpath(da, ra) && realpath(db, rb)) return !strcmp(ra, rb);
    // a folder realpath cannot name (deeper than PATH_MAX: ENAMETOOLONG, which answered "another file"
    // and let two outputs be written over each other): the same folder by its inode, else by its name
    return same_inode(da, db) || !strcmp(da, db);
}

static int ends_with(const char *s, const char *end) {
    size_t n = strlen(s), k = strlen(end);
    return n >= k && !strcmp(s + n - k, end);
}

int fc_check_not_an_input(const char *flag, const char *path, const FcInputs *in, char *err, size_t errlen) {
    if (access(path, F_OK)) return 0;  // a new file replaces nothing
    char dir[PATH_MAX];
    fc_folder_of(dir, sizeof dir, path);
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    int dataset_file = !strcmp(name, "dataset.json") || !strcmp(name, "manifest.tsv") ||
                       (!strncmp(name, "shard-", 6) && ends_with(name, ".safetensors"));
    if (dataset_file && in->data && same_inode(dir, in->data))
        return fc_errf(err, errlen, "%s %s: is a file of the dataset %s; give the output another name (--overwrite "
                       "never replaces what the command reads)", flag, path, in->data);
    int run_file = !strncmp(name, "ckpt-", 5) || !strcmp(name, "metrics.jsonl");
    for (int r = 0; r < in->n_runs; r++)
        if (run_file && in->runs[r] && same_inode(dir, in->runs[r]))
            return fc_errf(err, errlen, "%s %s: is a file of the run %s %s; give the output another name "
                           "(--overwrite never replaces a run's checkpoints and metrics)", flag, path, in->run_flag[r],
                           in->runs[r]);
    if (in->file && same_inode(path, in->file))
        return fc_errf(err, errlen, "%s %s: is %s %s; give the output another name (--overwrite never replaces what "
                       "the command reads)", flag, path, in->file_flag, in->file);
    return 0;
}
