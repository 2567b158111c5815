// common.c: error reporting, checked allocation, thread count, stop signals, the process start.
#include "base/common.h"
#include "base/address_space.h"

#include <stdarg.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/statvfs.h>
#include <fcntl.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <cblas.h>

static int g_quiet;  // fc_quiet_messages
static const char *g_origin = "";  // fc_message_origin

void fc_quiet_messages(int quiet) { g_quiet = quiet; }
int fc_messages_quiet(void) { return g_quiet; }
void fc_message_origin(const char *origin) { g_origin = origin ? origin : ""; }
const char *fc_message_origin_text(void) { return g_origin; }

void fc_exit(int status) {
    if (g_quiet) usleep(200000);
    exit(status);
}

size_t fc_utf8_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

size_t fc_printable_len(const uint8_t *s, size_t n) {
    if (s[0] < 0x20 || s[0] == 0x7f) return 0;                   // C0 controls and DEL
    if (s[0] == 0xC2 && n >= 2 && s[1] >= 0x80 && s[1] <= 0x9F) return 0;  // C1: U+0080-U+009F
    // Invisible characters that move the text around them: U+2028/U+2029 (line and paragraph
    // separators), the bidirectional embeddings and overrides U+202A-U+202E (E2 80 A8..AE) and
    // isolates U+2066-U+2069 (E2 81 A6..A9): a right-to-left override shows what follows reversed.
    if (s[0] == 0xE2 && n >= 3 && ((s[1] == 0x80 && s[2] >= 0xA8 && s[2] <= 0xAE) ||
                                   (s[1] == 0x81 && s[2] >= 0xA6 && s[2] <= 0xA9)))
        return 0;
    return fc_utf8_len(s, n);
}

char *fc_escaped_name(char *out, size_t outlen, const char *s) {
    size_t k = 0, n = strlen(s);
    for (const uint8_t *p = (const uint8_t *)s; n;) {
        size_t len = fc_printable_len(p, n);  // a character of 1 to 4 bytes, or 0: escape one byte
        char esc[5];
        if (!len && *p == '\n') strcpy(esc, "\\n");
        else if (!len && *p == '\t') strcpy(esc, "\\t");
        else if (!len) snprintf(esc, sizeof esc, "\\x%02x", *p);
        size_t wrote = len ? len : strlen(esc);
        if (k + wrote + 1 > outlen) break;
        memcpy(out + k, len ? (const char *)p : esc, wrote);
        k += wrote;
        len = len ? len : 1;
        p += len, n -= len;
    }
    if (outlen) out[k] = 0;
    return out;
}

const char *fc_write_fix(int e) {
    switch (e) {
    case ENOSPC:
    case EDQUOT: return "free space";
    case EACCES:
    case EPERM: return "give this user write permission there";
    case EROFS: return "make the file system writable";
    case EFBIG: return "raise the limit on file sizes (ulimit -f)";
    default: return "fix that";
    }
}

char *fc_double_text(char *buf, double v) {
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, FC_NUMBER_TEXT_LEN, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    return buf;
}

char *fc_shell_word(char *out, size_t len, const char *s) {
    if (s[0] && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=+,@%-") == strlen(s)) {
        snprintf(out, len, "%s", s);
        return out;
    }
    size_t n = 0;
    if (n + 1 < len) out[n++] = '\'';
    for (; *s && n + 5 < len; s++) {
        if (*s == '\'') memcpy(out + n, "'\\''", 4), n += 4;  // close, an escaped quote, reopen
        else out[n++] = *s;
    }
    if (n + 1 < len) out[n++] = '\'';
    out[n < len ? n : len - 1] = 0;
    return out;
}

// A message stays one line and leaves the terminal as it was, whatever a file's name holds: a line
// break or tab becomes a space, any other control character (an escape sequence's ESC, the C1 CSI
// U+009B, a bidirectional override) a '?', and so does each byte that is not part of valid UTF-8 (a
// lone 0x9b is the 8-bit CSI to some terminals). A C1 control or a bidirectional control takes two or
// three bytes and leaves one: the string may get shorter.
void fc_printable_line(char *s) {
    uint8_t *in = (uint8_t *)s, *out = in;
    size_t n = strlen(s);
    while (n) {
        size_t k = fc_printable_len(in, n);
        if (k) {
            memmove(out, in, k);
            out += k;
        } else {
            k = fc_utf8_len(in, n);  // a whole character (a C1 or bidirectional control): one '?'
            if (!k) k = 1;           // a byte outside valid UTF-8: a '?' of its own
            *out++ = *in == '\n' || *in == '\r' || *in == '\t' ? ' ' : '?';  // (out may be in)
        }
        in += k, n -= k;
    }
    *out = 0;
}

// ----------------------------------------------------------------------------
// progress lines on a terminal

static pthread_mutex_t g_progress_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_progress_stream;  // the stream whose progress line is open; NULL: none
static int g_progress_len;       // the open line's length, which the next one pads over

static void progress_end_locked(void) {
    if (!g_progress_stream) return;
    fputc('\n', g_progress_stream);
    fflush(g_progress_stream);
    g_progress_stream = NULL, g_progress_len = 0;
}

void fc_progress(FILE *stream, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    struct winsize ws;
    int len = (int)strlen(text);
    if (!ioctl(fileno(stream), TIOCGWINSZ, &ws) && ws.ws_col > 1 && len > ws.ws_col - 1) len = ws.ws_col - 1;
    pthread_mutex_lock(&g_progress_mu);
    if (g_progress_stream && g_progress_stream != stream) progress_end_locked();
    int pad = g_progress_len > len ? g_progress_len - len : 0;
    fprintf(stream, "\r%.*s%*s", len, text, pad, "");
    fflush(stream);
    g_progress_stream = stream, g_progress_len = len;
    pthread_mutex_unlock(&g_progress_mu);
}

void fc_progress_end(void) {
    pthread_mutex_lock(&g_progress_mu);
    progress_end_locked();
    pthread_mutex_unlock(&g_progress_mu);
}

void fc_line(FILE *stream, const char *fmt, ...) {
    pthread_mutex_lock(&g_progress_mu);
    progress_end_locked();
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stream, fmt, ap);
    va_end(ap);
    fputc('\n', stream);
    fflush(stream);
    pthread_mutex_unlock(&g_progress_mu);
}

// "framechain: <prefix><message>" and a newline on stderr, in one write: under mpirun the ranks' output
// and this process's own stdout reach one file through pipes, and a line written in pieces could be
// cut by another's (stdout is flushed first, so what was printed before the message stays before it).
static void vmessage(const char *prefix, const char *fmt, va_list ap) {
    if (g_quiet) return;
    char line[16384];  // a message quotes at most a path or two (PATH_MAX 4096 each)
    int head = snprintf(line, sizeof line, "framechain: %s%s", prefix, g_origin);
    int body = head >= 0 && head < (int)sizeof line ? vsnprintf(line + head, sizeof line - head, fmt, ap) : -1;
    size_t len = body >= 0 && (size_t)head + body + 1 < sizeof line ? (size_t)head + body : sizeof line - 5;
    if (len == sizeof line - 5) memcpy(line + len - 3, "...", 3);  // cut short (no message is this long)
    line[len] = 0;
    fc_printable_line(line);
    len = strlen(line);  // a C1 control's two bytes became one '?'
    line[len++] = '\n';
    fc_progress_end();  // a progress line left open on the terminal: the message on a line of its own
    fflush(stdout);
    for (size_t at = 0; at < len;) {
        ssize_t n = write(STDERR_FILENO, line + at, len - at);
        if (n <= 0 && errno != EINTR) break;
        if (n > 0) at += (size_t)n;
    }
}

static volatile sig_atomic_t g_stop_signal;  // fc_stop_signal

void fc_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage("", fmt, ap);
    va_end(ap);
    fc_exit(g_stop_signal ? 128 + g_stop_signal : 1);
}

void fc_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmessage("warning: ", fmt, ap);
    va_end(ap);
}

int fc_verrf(char *err, size_t errlen, const char *fmt, va_list ap) {
    if (!err || errlen == 0) return -1;
    vsnprintf(err, errlen, fmt, ap);
    fc_printable_line(err);
    return -1;
}

int fc_errf(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fc_verrf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *g_memory_hint = "lower batch_size or the frame size";

void fc_memory_hint(const char *hint) { g_memory_hint = hint; }

// The line of an allocation that failed: what to lower, and the address-space limit where one is set
// (ulimit -v or -d: memory may be free while the limit is reached)
void fc_out_of_memory(const char *what, const char *file, int line) {
    char limit[160] = "";
    double most, used;
    const char *ulimit;
    if (!fc_address_space_room(1e300, &most, &used, &ulimit))  // no room for everything: a limit is set
        snprintf(limit, sizeof limit, "; the address space is limited to %.0f MiB (%s %.0f): raise the limit",
                 most / 1048576, ulimit, most / 1024);
    fc_die("out of host memory: %s at %s:%d (hint: %s%s)", what, file, line, g_memory_hint, limit);
}

void *fc_malloc_check(size_t bytes, const char *file, int line) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        char what[64];
        snprintf(what, sizeof what, "%zu bytes", bytes);
        fc_out_of_memory(what, file, line);
    }
    return p;
}

void *fc_calloc_check(size_t count, size_t size, const char *file, int line) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) {
        char what[64];
        snprintf(what, sizeof what, "%zu x %zu bytes", count, size);
        fc_out_of_memory(what, file, line);
    }
    return p;
}

static int g_threads = 1;

void fc_set_threads(int n) {
    if (n < 1) n = 1;
    g_threads = n;
    // The CPU backend splits every GEMM itself, in blocks that do not depend on the thread count, and
    // calls OpenBLAS inside OpenMP parallel regions, where it runs one thread: so results are the same
    // bytes for any thread count. This alone would not do: the OpenMP build of OpenBLAS, called outside
    // a parallel region, takes OpenMP's thread count whatever it was told here. It comes first: that
    // build sets OpenMP's thread count too.
    openblas_set_num_threads(1);
#ifdef _OPENMP
    // A team of fewer threads than asked for (OMP_THREAD_LIMIT, or OMP_DYNAMIC under load) is not an
    // active parallel region, and OpenBLAS called from its one thread splits its GEMM over threads
    // the team never gets: the step waits for good. Teams are the size asked for, at most the limit.
    omp_set_dynamic(0);
    // so is every region under OMP_MAX_ACTIVE_LEVELS=0, which hung the first GEMM of 2 threads
    if (omp_get_max_active_levels() < 1) omp_set_max_active_levels(1);
    if (n > omp_get_thread_limit()) n = g_threads = omp_get_thread_limit();
    omp_set_num_threads(n);
#endif
}

int fc_threads(void) { return g_threads; }

int fc_default_threads(void) {
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && atoi(env) > 0) return atoi(env);
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}

size_t fc_resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    int got = f ? fscanf(f, "%lu %lu", &size, &resident) : 0;
    if (f) fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return got == 2 && page > 0 ? (size_t)resident * (size_t)page : 0;
}

size_t fc_machine_memory(int available) {
    long hook = fc_test_hook(available ? "MEM_AVAILABLE_MIB" : "MEM_TOTAL_MIB");
    if (hook >= 0) return (size_t)hook << 20;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    const char *want = available ? "MemAvailable:" : "MemTotal:";
    char line[256];
    size_t kib = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, want, strlen(want))) {
            kib = strtoull(line + strlen(want), NULL, 10);
            break;
        }
    fclose(f);
    return kib << 10;
}

double fc_disk_free(const char *path) {
    long hook = fc_test_hook("DISK_FREE_MIB");
    if (hook >= 0) return (double)hook * 1048576.0;
    struct statvfs sv;
    if (statvfs(path, &sv)) return -1;
    return (double)sv.f_bavail * (double)sv.f_frsize;
}

double fc_bytes_in_unit(double bytes, const char **unit) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    *unit = units[u];
    return bytes;
}

long fc_test_hook(const char *name) {
    char var[128];
    snprintf(var, sizeof var, "FRAMECHAIN_TEST_%s", name);
    const char *v = getenv(var);
    return v && *v ? atol(v) : -1;
}

void fc_test_hold(const char *name, const char *what) {
    long ms = fc_test_hook(name);
    if (ms <= 0) return;
    fprintf(stderr, "test hook: %s held for %ld ms\n", what, ms);  // (what the test waits for)
    usleep((useconds_t)ms * 1000);  // a signal that is caught ends it early
}

int fc_pread_all(int fd, void *buf, size_t n, uint64_t offset) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)offset);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            errno = EIO;
            return -1;
        }
        p += r, n -= (size_t)r, offset += (uint64_t)r;
    }
    return 0;
}

static const int STOP_SIGNALS[] = {SIGINT, SIGTERM, SIGHUP};
#define N_STOP_SIGNALS (int)(sizeof STOP_SIGNALS / sizeof STOP_SIGNALS[0])
static struct sigaction g_stop_before[N_STOP_SIGNALS];
static int g_stop_caught[N_STOP_SIGNALS];

static void on_stop_signal(int sig) {
    g_stop_signal = sig;
    signal(sig, SIG_DFL);  // a second one ends the program at once
}

void fc_catch_stop_signals(void) {
    for (int i = 0; i < N_STOP_SIGNALS; i++) {
        if (g_stop_caught[i] || sigaction(STOP_SIGNALS[i], NULL, &g_stop_before[i])) continue;
        // SIGHUP ignored is nohup's: the run goes on after the terminal closes. (SIGINT ignored is
        // every background job of a script's, whose kill -INT is still meant to stop it.)
        if (STOP_SIGNALS[i] == SIGHUP && g_stop_before[i].sa_handler == SIG_IGN) continue;
        struct sigaction sa = {0};
        sa.sa_handler = on_stop_signal;
        sa.sa_flags = SA_RESTART;  // reads and writes go on; the work stops at its next check
        sigemptyset(&sa.sa_mask);
        g_stop_caught[i] = sigaction(STOP_SIGNALS[i], &sa, NULL) == 0;
    }
}

void fc_release_stop_signals(void) {
    for (int i = 0; i < N_STOP_SIGNALS; i++)
        if (g_stop_caught[i]) sigaction(STOP_SIGNALS[i], &g_stop_before[i], NULL), g_stop_caught[i] = 0;
}

int fc_stop_signal(void) { return g_stop_signal; }

const char *fc_signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

void fc_process_start(void) {
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int got = open("/dev/null", fd ? O_WRONLY : O_RDONLY);
            if (got != fd) _exit(1);  // the lowest free number is fd: anything else cannot be said anywhere
        }
    signal(SIGXFSZ, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
}

static int g_stdout_is_report;

void fc_stdout_is_report(void) { g_stdout_is_report = 1; }

int fc_finish_stdout(int rc) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
    int e = errno;
    const char *why = e ? strerror(e) : "output cut short";
    if (g_stdout_is_report && rc == 0) {
        fprintf(stderr, "framechain: warning: standard output could not all be written (%s): part of the report on it "
                "is lost; what the command wrote to disk is whole\n", why);
        return 0;
    }
    fprintf(stderr, "framechain: write error on standard output: %s\n", why);
    return rc ? rc : 1;
}
