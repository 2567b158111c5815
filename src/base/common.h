// common.h: the scalar type, error reporting and checked allocation shared by every file.
#ifndef FRAMECHAIN_COMMON_H
#define FRAMECHAIN_COMMON_H

#include <stddef.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// The network is written against `real`. The program is built with float; the
// gradient tests compile the same sources with -DFC_DOUBLE so that finite
// differences are taken in double precision on exactly the code that ships.
#ifdef FC_DOUBLE
typedef double real;
#else
typedef float real;
#endif

#define FC_VERSION "0.1.0"

// Print one line "framechain: <message>" to stderr and exit with status 1 (128 + the signal where a stop
// signal was caught: the work ended for it).
void fc_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// Print one line "framechain: warning: <message>" to stderr.
void fc_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// While quiet, fc_die, fc_warn and usage_error print nothing (they still exit with their status).
// For the ranks of a machine after its first, while they read what every rank of it reads alike (the
// command line, the config file): the first rank says it once, not every rank.
void fc_quiet_messages(int quiet);
int fc_messages_quiet(void);
// While set (not NULL or ""), fc_die, fc_warn and usage_error put `origin` in front of their message's
// text: the machine a message is said for (dist_machine_origin), while its first rank speaks for its others.
void fc_message_origin(const char *origin);
const char *fc_message_origin_text(void);  // "" when none is set
// exit(status); while quiet, 0.2 s later, so that the rank that says why ends first (mpirun then names it).
void fc_exit(int status) __attribute__((noreturn));

// A progress line rewritten in place on a terminal ("\r" and the line, left open), and the lines
// printed beside it: fc_die, fc_warn and fc_line end an open progress line first, so that neither is
// glued to the other. The line is cut to the terminal's width less one column (a line that wraps
// leaves a row behind at every rewrite) and padded over the longer line it replaces. Thread-safe.
void fc_progress(FILE *stream, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The open progress line ended with a newline on its stream; nothing when none is open.
void fc_progress_end(void);
// One whole line (fmt ends without a newline: one is added) on stream, after ending the progress line.
void fc_line(FILE *stream, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// A message's text as every error line prints it, in place: a line break or tab becomes a space, any
// other control character (C0, DEL, a C1 control U+0080-U+009F, a bidirectional control U+202A-U+202E
// or U+2066-U+2069, the separators U+2028/U+2029) a '?', and so does each byte that is not part of
// valid UTF-8; printable characters of any language stay as they are. The string keeps its length or
// gets shorter (a control of two or three bytes becomes one '?'). For comparing a path with the error
// lines that quote it.
void fc_printable_line(char *s);
// The length of the valid UTF-8 sequence (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF) at s, of which n > 0 bytes are available; 0 when it is not one.
size_t fc_utf8_len(const uint8_t *s, size_t n);
// The length of the printable character at s (n > 0 bytes available): fc_utf8_len's, 0 for a control
// character (C0, DEL, C1, bidirectional, U+2028/U+2029) or a byte that does not start a valid sequence.
size_t fc_printable_len(const uint8_t *s, size_t n);
// A name (a path) as a progress or summary line, or a file's comment line, prints it: into out (outlen
// bytes; 4 strlen(s) + 1 hold any name whole), printable characters of any language as they are, a
// newline or tab as \n or \t, each other control byte or byte that is not part of valid UTF-8 as \xNN,
// so that the name stays on its one line and one written to drive a terminal prints as text. Cut
// between characters where out is too small. Returns out.
char *fc_escaped_name(char *out, size_t outlen, const char *s);
// fc_escaped_name into a buffer of the expression's own (a path of up to 4096 bytes whole), for a
// printf argument: printf("wrote %s\n", FC_ESCAPED(path)).
#define FC_ESCAPED_LEN (4 * 4096 + 1)
#define FC_ESCAPED(s) fc_escaped_name((char[FC_ESCAPED_LEN]){0}, FC_ESCAPED_LEN, (s))
// One word of a command line for a shell, into out (len bytes; 4 strlen(s) + 3 hold any word whole):
// as it is where no character needs quoting, else in single quotes (a path with a space, a quote or a
// '$' in it), so that a line that quotes a command can be pasted as printed. Returns out.
char *fc_shell_word(char *out, size_t len, const char *s);
// v in the fewest significant digits that read back as v (0.18215, not %.17g's 0.18215000000000001;
// 0.123456789, not %g's 0.123457), into buf (32 bytes hold any double). Returns buf.
#define FC_NUMBER_TEXT_LEN 32
char *fc_double_text(char *buf, double v);
#define FC_NUMBER(v) fc_double_text((char[FC_NUMBER_TEXT_LEN]){0}, (v))
// What a user does about a write that failed with errno e, for the line that stops on it: "free space"
// (a full disk or quota), "give this user write permission there", "make the file system writable",
// "raise the limit on file sizes (ulimit -f)", else "fix that".
const char *fc_write_fix(int e);

// The one way a function reports a failure to its caller: one line into err (when err is not NULL),
// newlines in it (a file name's) turned into spaces; returns -1 so that `return fc_errf(...)` ends
// the function. The caller prints the line, or adds its own context in front.
int fc_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int fc_verrf(char *err, size_t errlen, const char *fmt, va_list ap);

// malloc/calloc that report the file and line, the size and a hint when memory runs out.
// What the command's user lowers when host memory runs out, for fc_malloc's line ("lower --shard-mb
// or --size"); the default names batch_size and the frame size. A static string.
void fc_memory_hint(const char *hint);
void *fc_malloc_check(size_t bytes, const char *file, int line);
// fc_malloc's line for an allocation made another way (realloc, a library's own): what ran out, the
// hint and the address-space limit where one is set; exit(1).
void fc_out_of_memory(const char *what, const char *file, int line) __attribute__((noreturn));
#define FC_OUT_OF_MEMORY(what) fc_out_of_memory((what), __FILE__, __LINE__)
void *fc_calloc_check(size_t count, size_t size, const char *file, int line);
#define fc_malloc(bytes) fc_malloc_check((bytes), __FILE__, __LINE__)
#define fc_calloc(count, size) fc_calloc_check((count), (size), __FILE__, __LINE__)

// Number of CPU threads the program uses (OpenMP and OpenBLAS alike).
void fc_set_threads(int n);
int fc_threads(void);
// Threads to use when none are asked for: OMP_NUM_THREADS, else every core.
int fc_default_threads(void);

// The process's resident memory now, in bytes (/proc/self/statm); 0 where it cannot be read.
size_t fc_resident_bytes(void);
// The machine's memory (/proc/meminfo's MemTotal) and what it has available now for a new process
// without swapping (MemAvailable), in bytes; 0 where unknown. The tests set them with
// FRAMECHAIN_TEST_MEM_TOTAL_MIB and FRAMECHAIN_TEST_MEM_AVAILABLE_MIB.
size_t fc_machine_memory(int available);
// The bytes a file system has free for this process at path (statvfs: the blocks an unprivileged
// writer may take); -1 where unknown. The tests set it with FRAMECHAIN_TEST_DISK_FREE_MIB.
double fc_disk_free(const char *path);
// bytes in the largest of B, KiB, MiB, GiB and TiB (powers of 1024) that leaves at least 1: the value,
// and the unit's name in *unit.
double fc_bytes_in_unit(double bytes, const char **unit);

// pread exactly n bytes at offset, retrying on EINTR: 0, or -1 with errno set (EIO when the file
// ends early).
int fc_pread_all(int fd, void *buf, size_t n, uint64_t offset);

// Fault-injection hooks for the tests: the value of the environment variable FRAMECHAIN_TEST_<name>
// as a number, or -1 when it is not set. Used only to make a disk fail, a write slow or a sample
// bad on purpose.
long fc_test_hook(const char *name);
// A test hook that holds the command: where FRAMECHAIN_TEST_<name> is a number of milliseconds, one
// line "test hook: WHAT held for N ms" on stderr, then that long a sleep (so that a test's signal can
// land at that point).
void fc_test_hold(const char *name, const char *what);

// SIGINT, SIGTERM and SIGHUP (a closed terminal or ssh session), caught while a long command runs
// (train, generate, autoencode, prepare, eval, score): the work stops at its next safe point, fc_stop_signal()
// saying which came (0: none); a second one ends the program at once (the default action again).
// SIGHUP, where the process was started with it ignored (nohup), stays ignored.
// fc_release_stop_signals restores what was there before.
void fc_catch_stop_signals(void);
void fc_release_stop_signals(void);
int fc_stop_signal(void);
// "SIGINT", "SIGTERM" or "SIGHUP" (another number: "a signal").
const char *fc_signal_name(int sig);

// What every command needs of its process before anything else: file descriptors 0, 1 and 2 open
// (on /dev/null where a caller closed them: else the first file opened takes the number, and the
// progress lines written to it land inside an output video or a checkpoint), and SIGXFSZ ignored (a
// file size limit then fails the write that meets it, which the writers report and clean up after,
// instead of killing the process with its temporaries left), and SIGPIPE ignored (a reader gone, as
// after `| head` or a Ctrl-C that took `| tee` down too, fails a write to stdout instead of killing the
// process in the middle of a clean-up, or of the stop that reports 128 + its signal).
void fc_process_start(void);
// Called by a command once its product is on disk (a dataset, a run, a video, a TSV): its stdout is
// then a report beside it, and a report that could not all be written (a full disk under a
// redirection, a pipe closed by `| head`) is a warning, not a failure that would make a retry refuse
// the whole output as already there.
void fc_stdout_is_report(void);
// The exit status rc, or 1 with a line on stderr when what was written to stdout did not all reach
// it (a full disk under a redirection); after fc_stdout_is_report, rc with a warning instead: called as
// the program ends.
int fc_finish_stdout(int rc);

#endif
