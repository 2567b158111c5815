// paths.h: folders and files on disk.
#ifndef FRAMECHAIN_PATHS_H
#define FRAMECHAIN_PATHS_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

// fsync a folder, so that the names created, renamed or removed in it are on disk. 0, or -1 with errno.
int fc_fsync_dir(const char *dir);
// fsync the folder that holds the folder `dir` (its name there); a parent this process may not read
// is left as it is (0). 0, or -1 with errno.
int fc_fsync_parent(const char *dir);
// fsync a file (or a folder) by its path. 0, or -1 with errno.
int fc_fsync_path(const char *path);
// The end of a crash-safe write (the temporary tmp beside path, then its name): f, open on tmp with
// everything written, flushed, synced and closed, then tmp renamed onto path and its folder synced. A write
// error that f recorded (ferror) fails it too. On any failure tmp is removed. 0, or -1 with errno.
int fc_commit_file(FILE *f, const char *tmp, const char *path);
// After a loop of getline on f that ran until getline returned -1: 0 where that was the end of the
// file, else the errno of what stopped it (a read error; glibc's getline also returns -1, with ENOMEM
// and no error flag on the stream, for a line too long to hold, which taken for the end would cut a
// file's reader short: a cut-back of metrics.jsonl would lose the lines after it).
int fc_getline_error(FILE *f);
// The last step of writing a user's output (tmp written and synced beside path): tmp renamed onto
// path. With overwrite, over the file there, whose permissions it takes (a chmod 600 is not widened
// to the umask's); without, never over a file that appeared after the command checked that path was
// free (errno EEXIST; tmp stays for the caller to remove). 0, or -1 with errno.
int fc_place_output(const char *tmp, const char *path, int overwrite);
// rename(from, to) where nothing is at `to`: -1 with EEXIST where something is (RENAME_NOREPLACE, or
// a look first where the file system lacks it).
int fc_rename_new(const char *from, const char *to);
// fc_commit_file for a user's output: fc_place_output's rename.
int fc_commit_output(FILE *f, const char *tmp, const char *path, int overwrite);
// The line for a failed fc_place_output or fc_commit_output of `path` into err: "appeared while this
// command ran" for EEXIST, else "cannot write" with errno's text. Returns -1.
int fc_output_error(char *err, size_t errlen, const char *path);

// mkdir -p: create the folder and any missing parents (each new one fsynced in its parent). 0, or -1 with one line in err naming the part
// that could not be made, or the path when it exists but is not a folder.
int fc_mkdir_p(const char *dir, char *err, size_t errlen);
// Whether a part of path (path itself too) exists and is no folder, or is a link whose target does
// not exist: 1 with one line naming it ("a/b: a file, not a folder, in a/b/c"), else 0.
int fc_path_not_folder(const char *path, char *err, size_t errlen);
// The outermost folder on dir's path that does not exist yet (dir itself, or the parent of it that
// fc_mkdir_p would make first), malloc'ed; NULL when dir exists. What a command made for its output,
// to be taken back when it stops before writing any (fc_rmdir_made).
char *fc_missing_top(const char *dir);
// rmdir dir and then each parent up to and including top (fc_missing_top's answer for dir), inner to
// outer, stopping at the first that cannot go (rmdir leaves a folder that holds anything); one that is
// not there (its mkdir failed) is passed over. Safe in a signal handler; dir under 4096 bytes.
void fc_rmdir_made(const char *dir, const char *top);

// Open an existing regular file for reading, never blocking: a FIFO (or a device) named like a data
// file would hang a plain open() until a writer came, so it is opened with O_NONBLOCK, refused unless
// fstat says it is a regular file, and made blocking again. Returns the descriptor (O_CLOEXEC) with *st
// filled (st may be NULL), or -1 with one line in err: "PATH: cannot open: why" (errno kept from
// open) or "PATH: not a regular file (a FIFO)" (errno EINVAL).
int fc_open_regular(const char *path, struct stat *st, char *err, size_t errlen);

// fc_open_regular as a stdio stream for reading (the descriptor closed when fdopen fails): NULL with
// one line in err (errno kept from the open: ENOENT for a file that is not there).
FILE *fc_fopen_regular(const char *path, char *err, size_t errlen);

// The folder a path lies in, into dir (len bytes): "." for a bare name, "/" for one at the root.
void fc_folder_of(char *dir, size_t len, const char *path);

// The most digits a process id takes in a temporary name (pid_t is an int).
#define FC_PID_DIGITS 10

// The base name the temporaries of the file or folder `base` are named after, into dst (len bytes):
// base itself, or where base and a tag of `extra` bytes (".tmp-PID": 5 + FC_PID_DIGITS) would pass
// NAME_MAX, a prefix of base (whole UTF-8 characters), "~", 8 hex digits of a hash of all of base and
// base's last `tail` bytes (an extension that must stay): a legal output name of 240-255 bytes must not
// fail for its temporary's name. The same for the same base, so that cleanups find what a killed
// process left.
void fc_temp_base(char *dst, size_t len, const char *base, size_t extra, size_t tail);

// The temporary name "PATH<tag>PID" of this process for path (tag ".tmp-"), in path's folder, the base
// shortened by fc_temp_base where it would be too long. 0, or -1 when dst (len bytes) is too small.
int fc_temp_name(char *dst, size_t len, const char *path, const char *tag);

// The temporary files "PATH.tmp-PID" (fc_temp_name) beside path (written first, renamed onto it when whole) of
// processes that no longer run (a kill -9, a power cut): removed, each with a line. How many.
int fc_remove_stale_temps(const char *path);

// Whether a file can be made beside path now (its temporary name, made and removed at once): 0, or the
// errno. A folder that access() calls writable may still refuse one: /proc, a file system mounted
// read-only (which root's access() does not see). Said before the work, not when its output is due.
int fc_can_create_beside(const char *path);
// The folder of an output about to be written at path (dir: its name, sd: its stat): it exists, is a
// folder, can be written in, and a file can be made in it now (fc_can_create_beside); the temporary
// files of earlier writes of path that were cut off are removed first (fc_remove_stale_temps). 0, or
// -1 with one line in err that starts with `shown` (how the command names the output: "--tsv FILE", or FILE).
struct stat;
int fc_check_output_folder(const char *shown, const char *path, char *dir, size_t dirlen, struct stat *sd, char *err,
                           size_t errlen);
// Whether the file or folder `existing` in `folder` can be replaced by renaming a new one onto its
// name: not where the folder's sticky bit (as /tmp has) keeps it for its owner (or the folder's, or
// root). 0, or -1 with one line in err that starts with `shown`.
int fc_check_replaceable(const char *shown, const struct stat *folder, const struct stat *existing, char *err,
                         size_t errlen);
// Whether path is where a file system is mounted (this process's /proc/self/mountinfo): 1, 0, or -1
// where that cannot be read. (A folder on another device than its parent may be no mount point: a
// btrfs subvolume, which can be renamed.)
int fc_is_mount_point(const char *path);

// An output file about to be written (through a temporary file beside it): its folder exists and a file
// can be made in it now, and path is not a folder, a symbolic link, a device, FIFO or socket (a rename onto the
// name would replace those, not write into them), nor (replace 0) an existing file. 0, or -1 with one line in
// err naming the flag and the path. Checked before the work, so that a bad path costs nothing; the
// temporary files of earlier writes of path that were cut off go first (fc_check_output_folder).
int fc_check_output_file(const char *flag, const char *path, int replace, char *err, size_t errlen);

// 1 when the paths a and b (existing or not) name one file: the same folder, resolved, and last name.
int fc_same_file_name(const char *a, const char *b);

// What a command reads, which its output (flag, path) must never replace, --overwrite or not: the
// dataset folder's own files (dataset.json, manifest.tsv, its shards), each run folder's checkpoints
// and metrics.jsonl (run_flag[i] names runs[i] in the message; a NULL run is skipped), and the file
// `file` (the autoencoder, or NULL). Other files in those folders (an earlier table) may be replaced.
// Folders compared by device and inode, so under another name too. A path not there yet replaces
// nothing. Returns 0, or -1 with one line in err.
typedef struct {
    const char *data;             // a dataset folder, or NULL
    const char *const *runs;      // (n_runs) run folders
    const char *const *run_flag;  // (n_runs) the option that gave each
    int n_runs;
    const char *file, *file_flag;  // one more file read (the autoencoder), or NULL
} FcInputs;
int fc_check_not_an_input(const char *flag, const char *path, const FcInputs *in, char *err, size_t errlen);

#endif
