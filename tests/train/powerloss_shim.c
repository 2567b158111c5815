// powerloss_shim.c: an LD_PRELOAD library that records every change a process makes to the files
// under one folder, for tests/train/powerloss.py to rebuild the states a power cut could leave.
//
//   FC_POWERLOSS_ROOT=DIR        the folder watched (its files and folders, at any depth)
//   FC_POWERLOSS_LOG=FILE        the log, appended to: one line per operation; the bytes of every
//                                write go to FILE.data, the line gives their offset there
//   FC_POWERLOSS_SKIP_FSYNC=K    fault injection: the K-th fsync/fdatasync under DIR (counted from 1
//                                in this process) does nothing and returns 0; it is logged as
//                                "skipfsync", never as "fsync", so the replay believes nothing synced
//   FC_POWERLOSS_SKIP_FSYNC=K:PATH   the same for the K-th fsync of PATH (relative to DIR; PATH* for
//                                the paths that begin so): a count no other thread's fsyncs can shift
//
// Log lines, tab-separated: OP PID TID then the operation's fields; paths are relative to DIR
// ("." is DIR itself). Only calls that succeeded are logged, and each is done and logged under one
// mutex, so the log's order is the order the kernel saw them in (the checkpoint writer is a thread).
//   start   pid tid                                       a process begins
//   open    pid tid fd path created truncated isdir       (created: the name is new)
//   write   pid tid fd path offset length dataoffset      (write, pwrite and stdio streams)
//   trunc   pid tid fd path length                        (ftruncate; O_TRUNC is on the open line)
//   fsync   pid tid fd path n                             (fsync and fdatasync; n: the count)
//   skipfsync pid tid fd path n
//   close   pid tid fd path
//   rename  pid tid from to
//   unlink  pid tid path
//   rmdir   pid tid path
//   mkdir   pid tid path
//   movedin pid tid path                                  (a rename from outside DIR: not replayable)
//
// glibc's stdio does not go through the write, open and close symbols (it calls its own internal
// ones), so a stream opened for writing under DIR is made here with fopencookie over an fd that
// this library opened: its bytes reach the file through the logged write. fileno gives that fd.
// (framechain's fdopen streams under DIR only read; their fclose is logged as the fd's close.)
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_FD 4096

static int (*real_open)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_rmdir)(const char *);
static int (*real_mkdir)(const char *, mode_t);
static int (*real_mkdirat)(int, const char *, mode_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_close)(int);
static FILE *(*real_fopen)(const char *, const char *);
static int (*real_fileno)(FILE *);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char root[PATH_MAX];
static size_t root_len;
static int log_fd = -1, data_fd = -1;
static long skip_at = -1, n_fsync = 0, n_skip_path = 0;
static char skip_path[PATH_MAX];  // K:PATH's path ("" for a plain K); a trailing '*' matches any rest
static char *fd_path[MAX_FD];  // the relative path of each fd opened under root; NULL: not watched

static void init(void);

#define REAL(name) (real_##name ? real_##name : (init(), real_##name))

static void die(const char *what) {
    char msg[512];
    int n = snprintf(msg, sizeof msg, "powerloss_shim: %s: %s\n", what, strerror(errno));
    if (REAL(write)(2, msg, (size_t)n) < 0) {}
    _exit(99);
}

__attribute__((constructor)) static void init(void) {
    static int started;
    if (started++) return;
    real_open = dlsym(RTLD_NEXT, "open");
    real_openat = dlsym(RTLD_NEXT, "openat");
    real_write = dlsym(RTLD_NEXT, "write");
    real_pwrite = dlsym(RTLD_NEXT, "pwrite");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_rename = dlsym(RTLD_NEXT, "rename");
    real_renameat = dlsym(RTLD_NEXT, "renameat");
    real_renameat2 = dlsym(RTLD_NEXT, "renameat2");
    real_unlink = dlsym(RTLD_NEXT, "unlink");
    real_unlinkat = dlsym(RTLD_NEXT, "unlinkat");
    real_rmdir = dlsym(RTLD_NEXT, "rmdir");
    real_mkdir = dlsym(RTLD_NEXT, "mkdir");
    real_mkdirat = dlsym(RTLD_NEXT, "mkdirat");
    real_ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    real_close = dlsym(RTLD_NEXT, "close");
    real_fopen = dlsym(RTLD_NEXT, "fopen");
    real_fileno = dlsym(RTLD_NEXT, "fileno");
    const char *r = getenv("FC_POWERLOSS_ROOT"), *log = getenv("FC_POWERLOSS_LOG"), *k = getenv("FC_POWERLOSS_SKIP_FSYNC");
    if (!r || !*r || !log || !*log) return;  // nothing watched: every call passes straight through
    if (!realpath(r, root)) die("FC_POWERLOSS_ROOT");
    root_len = strlen(root);
    char data[PATH_MAX + 8];
    snprintf(data, sizeof data, "%s.data", log);
    // The log's own fds are outside root (the test puts them there), so they are never watched.
    log_fd = real_open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    data_fd = real_open(data, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0 || data_fd < 0) die(log);
    if (k && *k) {
        skip_at = atol(k);
        const char *colon = strchr(k, ':');
        if (colon) snprintf(skip_path, sizeof skip_path, "%s", colon + 1);
    }
    char line[64];
    int n = snprintf(line, sizeof line, "start\t%ld\t%ld\n", (long)getpid(), (long)syscall(SYS_gettid));
    if (real_write(log_fd, line, (size_t)n) != n) die("log");
}

// ---- paths ----

// The absolute path of `path` (relative to the folder of dirfd), lexically: "." and ".." are folded,
// symbolic links are not followed (the test's folders have none).
static int absolute(int dirfd, const char *path, char *out) {
    char buf[2 * PATH_MAX];
    if (path[0] == '/') {
        snprintf(buf, sizeof buf, "%s", path);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base)) return -1;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n < 0) return -1;
            base[n] = 0;
        }
        snprintf(buf, sizeof buf, "%s/%s", base, path);
    }
    // fold the components
    char *parts[512];
    int np = 0;
    for (char *save = NULL, *p = strtok_r(buf, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (!strcmp(p, ".")) continue;
        if (!strcmp(p, "..")) {
            if (np) np--;
            continue;
        }
        if (np < 512) parts[np++] = p;
    }
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < np; i++) {
        size_t l = strlen(parts[i]);
        if (len + l + 2 >= PATH_MAX) return -1;
        out[len++] = '/';
        memcpy(out + len, parts[i], l);
        len += l;
        out[len] = 0;
    }
    if (!np) strcpy(out, "/");
    return 0;
}

// The path relative to root in rel ("." for root itself); 0 when it is not under root.
static int watched(int dirfd, const char *path, char *rel) {
    char abs[PATH_MAX];
    if (log_fd < 0 || !path || absolute(dirfd, path, abs)) return 0;
    if (strncmp(abs, root, root_len)) return 0;
    if (abs[root_len] == 0) {
        strcpy(rel, ".");
        return 1;
    }
    if (abs[root_len] != '/') return 0;
    snprintf(rel, PATH_MAX, "%s", abs + root_len + 1);
    return 1;
}

static const char *fd_watched(int fd) { return fd >= 0 && fd < MAX_FD ? fd_path[fd] : NULL; }

// ---- the log (under mu) ----

static void log_line(const char *fmt, ...) {
    char line[3 * PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(line, sizeof line, "%s\t%ld\t%ld\t", va_arg(ap, const char *), (long)getpid(),
                     (long)syscall(SYS_gettid));
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    line[n++] = '\n';
    if (real_write(log_fd, line, (size_t)n) != n) die("log");
}

// The bytes of a write go to the data file; returns where they start there.
static long log_data(const void *buf, size_t n) {
    const char *p = buf;
    size_t left = n;
    while (left) {
        ssize_t w = real_write(data_fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            die("data log");
        }
        p += w, left -= (size_t)w;
    }
    return (long)lseek(data_fd, 0, SEEK_CUR) - (long)n;
}

static void track(int fd, const char *rel) {
    if (fd < 0 || fd >= MAX_FD) return;
    free(fd_path[fd]);
    fd_path[fd] = rel ? strdup(rel) : NULL;
}

// An fd that this library did not see closed (a stream of fdopen's, closed inside stdio) may come
// back from an open elsewhere: it is no longer the file under root.
static void forget(int fd) {
    if (!fd_watched(fd)) return;
    pthread_mutex_lock(&mu);
    track(fd, NULL);
    pthread_mutex_unlock(&mu);
}

// ---- open ----

static int do_open(int dirfd, const char *path, int flags, mode_t mode) {
    char rel[PATH_MAX];
    if (!watched(dirfd, path, rel)) {
        int fd = REAL(openat)(dirfd, path, flags, mode);
        forget(fd);
        return fd;
    }
    pthread_mutex_lock(&mu);
    int save = errno;
    struct stat sb;
    int existed = fstatat(dirfd, path, &sb, 0) == 0;
    errno = save;
    int fd = real_openat(dirfd, path, flags, mode);
    if (fd >= 0) {
        int isdir = existed ? S_ISDIR(sb.st_mode) : 0;
        track(fd, rel);
        save = errno;
        log_line("%d\t%s\t%d\t%d\t%d", "open", fd, rel, !existed, (flags & O_TRUNC) && !isdir && existed, isdir);
        errno = save;
    }
    pthread_mutex_unlock(&mu);
    return fd;
}

static mode_t mode_of(int flags, va_list ap) {
    return (flags & O_CREAT) || (flags & __O_TMPFILE) == __O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    return do_open(AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    return do_open(AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    return do_open(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    return do_open(dirfd, path, flags, mode);
}

int creat(const char *path, mode_t mode) { return do_open(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode); }
int creat64(const char *path, mode_t mode) { return do_open(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode); }

// ---- data ----

// A write at the fd's position (offset < 0) or at offset; logged with where its bytes landed.
static ssize_t do_write(int fd, const void *buf, size_t n, off_t offset) {
    if (!fd_watched(fd)) return offset < 0 ? REAL(write)(fd, buf, n) : REAL(pwrite)(fd, buf, n, offset);
    pthread_mutex_lock(&mu);
    const char *rel = fd_watched(fd);
    ssize_t w = offset < 0 ? real_write(fd, buf, n) : real_pwrite(fd, buf, n, offset);
    if (w > 0 && rel) {
        int save = errno;
        // after the write the position is its end (O_APPEND included); pwrite leaves it alone
        long at = offset < 0 ? (long)lseek(fd, 0, SEEK_CUR) - (long)w : (long)offset;
        long data = log_data(buf, (size_t)w);
        log_line("%d\t%s\t%ld\t%zd\t%ld", "write", fd, rel, at, w, data);
        errno = save;
    }
    pthread_mutex_unlock(&mu);
    return w;
}

ssize_t write(int fd, const void *buf, size_t n) { return do_write(fd, buf, n, -1); }
ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset) { return do_write(fd, buf, n, offset); }
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t offset) { return do_write(fd, buf, n, offset); }

static int do_ftruncate(int fd, off_t len) {
    if (!fd_watched(fd)) return REAL(ftruncate)(fd, len);
    pthread_mutex_lock(&mu);
    int rc = real_ftruncate(fd, len);
    if (!rc) log_line("%d\t%s\t%ld", "trunc", fd, fd_watched(fd), (long)len);
    pthread_mutex_unlock(&mu);
    return rc;
}

int ftruncate(int fd, off_t len) { return do_ftruncate(fd, len); }
int ftruncate64(int fd, off_t len) { return do_ftruncate(fd, len); }

static int do_fsync(int fd, int data_only) {
    if (!fd_watched(fd)) return data_only ? REAL(fdatasync)(fd) : REAL(fsync)(fd);
    pthread_mutex_lock(&mu);
    long k = ++n_fsync;
    int rc = 0, skip = k == skip_at;
    if (skip_path[0]) {  // K:PATH: count this path's fsyncs alone
        size_t n = strlen(skip_path);
        const char *path = fd_watched(fd);
        int match = skip_path[n - 1] == '*' ? !strncmp(path, skip_path, n - 1) : !strcmp(path, skip_path);
        skip = match && ++n_skip_path == skip_at;
    }
    if (skip) {
        log_line("%d\t%s\t%ld", "skipfsync", fd, fd_watched(fd), k);  // the call never reaches the disk
    } else {
        rc = data_only ? real_fdatasync(fd) : real_fsync(fd);
        if (!rc) log_line("%d\t%s\t%ld", "fsync", fd, fd_watched(fd), k);
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int fsync(int fd) { return do_fsync(fd, 0); }
int fdatasync(int fd) { return do_fsync(fd, 1); }

int close(int fd) {
    if (!fd_watched(fd)) return REAL(close)(fd);
    pthread_mutex_lock(&mu);
    char *rel = fd_path[fd];
    fd_path[fd] = NULL;
    int rc = real_close(fd);
    log_line("%d\t%s", "close", fd, rel);  // the fd is gone even when close fails
    free(rel);
    pthread_mutex_unlock(&mu);
    return rc;
}

// ---- names ----

static int do_rename(int olddir, const char *from, int newdir, const char *to, unsigned flags, int which) {
    char a[PATH_MAX], b[PATH_MAX];
    int wa = watched(olddir, from, a), wb = watched(newdir, to, b);
    if (!wa && !wb) {
        if (which == 0) return REAL(rename)(from, to);
        if (which == 1) return REAL(renameat)(olddir, from, newdir, to);
        return REAL(renameat2)(olddir, from, newdir, to, flags);
    }
    pthread_mutex_lock(&mu);
    int rc = which == 0 ? real_rename(from, to) : which == 1 ? real_renameat(olddir, from, newdir, to)
                                                             : real_renameat2(olddir, from, newdir, to, flags);
    if (!rc) {
        int save = errno;
        // a file moved out is gone; one moved in brings bytes the log never saw (the replay refuses it)
        if (wa && wb) log_line("%s\t%s", "rename", a, b);
        else if (wa) log_line("%s", "unlink", a);
        else log_line("%s", "movedin", b);
        errno = save;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int rename(const char *from, const char *to) { return do_rename(AT_FDCWD, from, AT_FDCWD, to, 0, 0); }
int renameat(int od, const char *from, int nd, const char *to) { return do_rename(od, from, nd, to, 0, 1); }
int renameat2(int od, const char *from, int nd, const char *to, unsigned flags) {
    return do_rename(od, from, nd, to, flags, 2);
}

static int do_unlink(int dirfd, const char *path, int flags) {
    char rel[PATH_MAX];
    if (!watched(dirfd, path, rel)) return REAL(unlinkat)(dirfd, path, flags);
    pthread_mutex_lock(&mu);
    int rc = real_unlinkat(dirfd, path, flags);
    if (!rc) {
        int save = errno;
        log_line("%s", flags & AT_REMOVEDIR ? "rmdir" : "unlink", rel);
        errno = save;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int unlink(const char *path) { return do_unlink(AT_FDCWD, path, 0); }
int unlinkat(int dirfd, const char *path, int flags) { return do_unlink(dirfd, path, flags); }
int rmdir(const char *path) { return do_unlink(AT_FDCWD, path, AT_REMOVEDIR); }

static int do_mkdir(int dirfd, const char *path, mode_t mode) {
    char rel[PATH_MAX];
    if (!watched(dirfd, path, rel)) return REAL(mkdirat)(dirfd, path, mode);
    pthread_mutex_lock(&mu);
    int rc = real_mkdirat(dirfd, path, mode);
    if (!rc) {
        int save = errno;
        log_line("%s", "mkdir", rel);
        errno = save;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int mkdir(const char *path, mode_t mode) { return do_mkdir(AT_FDCWD, path, mode); }
int mkdirat(int dirfd, const char *path, mode_t mode) { return do_mkdir(dirfd, path, mode); }

// ---- stdio streams opened for writing ----

typedef struct {
    int fd;
} Cookie;

static ssize_t cookie_read(void *c, char *buf, size_t n) { return read(((Cookie *)c)->fd, buf, n); }
static ssize_t cookie_write(void *c, const char *buf, size_t n) {
    ssize_t w = do_write(((Cookie *)c)->fd, buf, n, -1);
    return w < 0 ? 0 : w;  // a cookie write reports an error as 0 bytes written
}
static int cookie_seek(void *c, off64_t *off, int whence) {
    off64_t r = lseek(((Cookie *)c)->fd, *off, whence);
    if (r < 0) return -1;
    *off = r;
    return 0;
}
static int cookie_close(void *c) {
    int rc = close(((Cookie *)c)->fd);
    free(c);
    return rc;
}

// The streams this library made, for fileno.
static FILE *streams[256];
static int stream_fd[256];

FILE *fopen(const char *path, const char *mode) {
    char rel[PATH_MAX];
    int writes = strpbrk(mode, "wa+") != NULL;
    if (!writes || !watched(AT_FDCWD, path, rel)) {
        FILE *f = REAL(fopen)(path, mode);
        if (f) forget(REAL(fileno)(f));
        return f;
    }
    int flags = strchr(mode, '+') ? O_RDWR : O_WRONLY;
    if (mode[0] == 'w') flags |= O_CREAT | O_TRUNC;
    if (mode[0] == 'a') flags |= O_CREAT | O_APPEND;
    if (mode[0] == 'r') flags = O_RDWR;
    if (strchr(mode, 'e')) flags |= O_CLOEXEC;
    if (strchr(mode, 'x')) flags |= O_EXCL;
    int fd = do_open(AT_FDCWD, path, flags, 0666);
    if (fd < 0) return NULL;
    Cookie *c = malloc(sizeof *c);
    c->fd = fd;
    cookie_io_functions_t io = {cookie_read, cookie_write, cookie_seek, cookie_close};
    char m[8];
    snprintf(m, sizeof m, "%s", mode[0] == 'a' ? "a" : mode[0] == 'w' ? "w" : "r+");
    if (strchr(mode, '+') && mode[0] != 'r') strcat(m, "+");
    FILE *f = fopencookie(c, m, io);
    if (!f) {
        close(fd);
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 256; i++)
        if (!streams[i]) {
            streams[i] = f, stream_fd[i] = fd;
            break;
        }
    pthread_mutex_unlock(&mu);
    return f;
}

FILE *fopen64(const char *path, const char *mode) { return fopen(path, mode); }

int fileno(FILE *f) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 256; i++)
        if (streams[i] == f) {
            int fd = stream_fd[i];
            pthread_mutex_unlock(&mu);
            return fd;
        }
    pthread_mutex_unlock(&mu);
    return REAL(fileno)(f);
}

// A stream of this library's closes through cookie_close; any other (fdopen's over an fd opened
// under root, say) closes its fd inside stdio, which is logged here.
int fclose(FILE *f) {
    static int (*real_fclose)(FILE *);
    if (!real_fclose) real_fclose = dlsym(RTLD_NEXT, "fclose");
    int ours = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 256; i++)
        if (streams[i] == f) streams[i] = NULL, ours = 1;
    pthread_mutex_unlock(&mu);
    int fd = ours ? -1 : REAL(fileno)(f);
    int rc = real_fclose(f);
    if (fd >= 0 && fd_watched(fd)) {
        pthread_mutex_lock(&mu);
        if (fd_path[fd]) log_line("%d\t%s", "close", fd, fd_path[fd]);
        track(fd, NULL);
        pthread_mutex_unlock(&mu);
    }
    return rc;
}
