// test_shard_damage.c: the clip dataset (shards.c) after what befalls files on disk: crash safety (an
// aborted writer, kill -9 mid-write, stale temporary files and unlisted shards) and corrupt,
// truncated, grown and oversized files, each refused with one line naming it, nothing half-read.
// The round trips: test_shards.c.
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "base/common.h"
#include "formats/safetensors.h"
#include "formats/shard_fixture.h"
#include "formats/shards.h"

// ---- crash safety ----

static void test_crash_safety(void) {
    const int N = 8, F = 4;
    size_t raw = (size_t)F * N * N * 3;
    char dir[512], err[1024], path[600];
    uint8_t *c = fc_malloc(raw);
    clip_random(c, raw, 9);

    // abort half-way: the shards written are taken back with the folders the writer made (three
    // levels here), and no dataset is left to open
    char top[512];
    folder(top, sizeof top, "aborted");
    snprintf(dir, sizeof dir, "%s/made/by//writer/", top);
    ShardWriter *w = shard_writer_open(dir, N, F, raw, err, sizeof err);
    int added = 0, written = 0;
    for (int i = 0; w && i < 5; i++) added += !shard_writer_add(w, c, "x.mp4", i, 25, err, sizeof err);
    written = exists(dir, "shard-00000.safetensors") && exists(dir, "shard-00003.safetensors");
    shard_writer_abort(w);
    struct stat st;
    Dataset *d = dataset_open(dir, err, sizeof err);
    check(added == 5 && written && stat(top, &st) && !d && one_line(err), "shards_abort_takes_back_its_files",
          "shards 0 and 3 on disk before the abort: %s; after it %s; opening: %s", written ? "yes" : "no",
          stat(top, &st) ? "no folder" : "the folder is still there", err);
    dataset_close(d);
    // in a folder that was there before, with a file of the user's: the shards go, the rest stays
    folder(dir, sizeof dir, "aborted_there");
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    write_text(path, "mine", 4);
    w = shard_writer_open(dir, N, F, raw, err, sizeof err);
    for (int i = 0; w && i < 3; i++) shard_writer_add(w, c, "x.mp4", i, 25, err, sizeof err);
    written = exists(dir, "shard-00001.safetensors");
    shard_writer_abort(w);
    check(written && !exists(dir, "shard-00000.safetensors") && !exists(dir, "shard-00001.safetensors") &&
              exists(dir, "notes.txt"),
          "shards_abort_keeps_what_was_there", "shards written (%s), then removed; the folder and notes.txt kept",
          written ? "yes" : "no");

    // no clip at all: finish refuses, writes nothing and takes back the folder it made
    folder(dir, sizeof dir, "empty");
    w = shard_writer_open(dir, N, F, 0, err, sizeof err);
    int rc = w ? shard_writer_finish(w, err, sizeof err) : 0;
    check(w && rc == -1 && one_line(err) && stat(dir, &st), "shards_finish_without_clips", "%s; the folder %s", err,
          stat(dir, &st) ? "removed" : "left");

    // dataset.json renamed into place but its folder's fsync failed: finish fails and nothing of the
    // writer's stays, dataset.json first (it must never name shards that are gone)
    folder(dir, sizeof dir, "json_not_durable");
    w = shard_writer_open(dir, N, F, raw, err, sizeof err);
    for (int i = 0; w && i < 3; i++) shard_writer_add(w, c, "x.mp4", i, 25, err, sizeof err);
    setenv("FRAMECHAIN_TEST_FAIL_FOLDER_FSYNC_OF", "dataset.json", 1);
    rc = w ? shard_writer_finish(w, err, sizeof err) : 0;
    unsetenv("FRAMECHAIN_TEST_FAIL_FOLDER_FSYNC_OF");
    check(w && rc == -1 && one_line(err) && strstr(err, "dataset.json") && stat(dir, &st), "shards_finish_json_not_durable",
          "%s; the folder %s", err, stat(dir, &st) ? "removed" : "left");

    // a stale temporary file is ignored by the reader and removed by the next writer
    folder(dir, sizeof dir, "stale");
    rc = make_dataset(dir, N, F, "rrr", 0, NULL, NULL, err, sizeof err);
    snprintf(path, sizeof path, "%s/shard-00000.safetensors.tmp-99999", dir);
    write_text(path, "junk", 4);
    snprintf(path, sizeof path, "%s/dataset.json.tmp-99999", dir);
    write_text(path, "{", 1);
    d = rc ? NULL : dataset_open(dir, err, sizeof err);
    check(d && dataset_clips(d) == 3, "shards_stale_temp_ignored", "%s",
          d ? "the dataset opens beside 2 stale temporary files" : err);
    dataset_close(d);
    char dir2[512];
    folder(dir2, sizeof dir2, "stale2");
    mkdir(dir2, 0755);
    snprintf(path, sizeof path, "%s/shard-00003.safetensors.tmp-4242", dir2);
    write_text(path, "junk", 4);
    // whole shards that no dataset.json lists (a writer killed before its dataset.json; here a copy of
    // the shard above, as only a file that begins as prepare's shards do is taken for one): removed too;
    // files that are no shard stay
    char from[600];
    snprintf(from, sizeof from, "%s/shard-00000.safetensors", dir);
    snprintf(path, sizeof path, "%s/shard-00007.safetensors", dir2);
    FILE *src = fopen(from, "rb");
    static char shard_bytes[1 << 20];
    size_t shard_len = src ? fread(shard_bytes, 1, sizeof shard_bytes, src) : 0;
    if (src) fclose(src);
    write_text(path, shard_bytes, shard_len);
    snprintf(path, sizeof path, "%s/notes.txt", dir2);
    write_text(path, "mine", 4);
    w = shard_writer_open(dir2, N, F, 0, err, sizeof err);
    check(w && !exists(dir2, "shard-00003.safetensors.tmp-4242"), "shards_writer_removes_stale_temps", "%s",
          w ? "removed at open" : err);
    check(w && !exists(dir2, "shard-00007.safetensors") && exists(dir2, "notes.txt"),
          "shards_writer_removes_unlisted_shards", "%s",
          w ? "a shard no dataset.json lists removed at open, notes.txt kept" : err);
    shard_writer_abort(w);
    // one writer a folder: a second is refused while the first lives, and takes the folder once it ended;
    // a finished dataset keeps no lock file
    char one[512];
    folder(one, sizeof one, "one_writer");
    ShardWriter *w1 = shard_writer_open(one, N, F, raw, err, sizeof err);
    char err2[1024] = "";
    ShardWriter *w2 = shard_writer_open(one, N, F, raw, err2, sizeof err2);
    int refused = w1 && !w2 && one_line(err2) && strstr(err2, "another framechain prepare");
    shard_writer_abort(w2);
    if (w1) shard_writer_add(w1, c, "x.mp4", 0, 25, err, sizeof err);
    shard_writer_abort(w1);
    w2 = shard_writer_open(one, N, F, raw, err, sizeof err);
    if (w2) shard_writer_add(w2, c, "x.mp4", 0, 25, err, sizeof err);
    int finished = w2 && !shard_writer_finish(w2, err, sizeof err);
    check(refused && finished && !exists(one, ".prepare.lock"), "shards_one_writer_a_folder",
          "the second writer %s (%s); after the first ended it %s; lock file left: %s", refused ? "was refused" : "was not refused",
          err2, finished ? "finished" : err, exists(one, ".prepare.lock") ? "yes" : "no");

    // a folder that already holds a dataset is refused
    w = shard_writer_open(dir, N, F, 0, err, sizeof err);
    check(!w && one_line(err) && strstr(err, "already holds a dataset"), "shards_writer_refuses_existing", "%s", err);
    shard_writer_abort(w);
    // a path that names a file, not a folder
    snprintf(path, sizeof path, "%s/plain_file", g_root);
    write_text(path, "x", 1);
    w = shard_writer_open(path, N, F, 0, err, sizeof err);
    check(!w && one_line(err) && strstr(err, "not a folder"), "shards_writer_refuses_a_file_as_folder", "%s",
          w ? "accepted" : err);
    shard_writer_abort(w);

    // kill -9 at moments all through a prepare (timed by one run left alone): never a dataset.json
    // that names a bad shard
    int none = 0, whole = 0, bad = 0;
    double full = 0;
    for (int k = -1; k < 10; k++) {
        char kd[512];
        snprintf(kd, sizeof kd, "%s/killed-%d", g_root, k);
        rm_rf(kd);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("FRAMECHAIN_TEST_WRITE_DELAY_MS", "15", 1);
            char e[1024];
            ShardWriter *cw = shard_writer_open(kd, N, F, raw, e, sizeof e);
            for (int i = 0; cw && i < 6; i++)
                if (shard_writer_add(cw, c, "y.mp4", i, 25, e, sizeof e)) _exit(3);
            _exit(cw && !shard_writer_finish(cw, e, sizeof e) ? 0 : 3);
        }
        int status;
        if (k < 0) {  // the run left alone, for its duration
            double t0 = fc_now_s();
            waitpid(pid, &status, 0);
            full = fc_now_s() - t0;
            rm_rf(kd);
            continue;
        }
        usleep((useconds_t)(1e6 * full * k / 8));  // from the start to beyond the end
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        Dataset *kdset = dataset_open(kd, err, sizeof err);
        if (!exists(kd, "dataset.json")) {
            none += !kdset && one_line(err) && (strstr(err, "no dataset.json") || strstr(err, "no such folder"));
            bad += kdset != NULL;
        } else if (kdset) {
            uint8_t *buf = fc_malloc(raw);
            int okc = 0;
            for (int i = 0; i < dataset_clips(kdset); i++) okc += !dataset_read_clip(kdset, i, buf, err, sizeof err);
            if (okc == 6 && dataset_clips(kdset) == 6) whole++;
            else bad++;
            free(buf);
        } else {
            bad++;
        }
        dataset_close(kdset);
        rm_rf(kd);
    }
    check(bad == 0 && none + whole == 10 && none > 0, "shards_kill9_mid_prepare",
          "10 kills over a %.0f ms prepare: %d left no dataset.json, %d a whole dataset, %d anything else",
          1e3 * full, none, whole, bad);
    free(c);
}

// ---- corruption ----

static void test_corruption(void) {
    const int N = 16, F = 8;
    size_t raw = (size_t)F * N * N * 3;
    char good[512], dir[512], err[1024], path[700];
    folder(good, sizeof good, "good");
    if (make_dataset(good, N, F, "rsrsrs", 2 * raw, NULL, NULL, err, sizeof err)) {
        check(0, "shards_corruption_setup", "%s", err);
        return;
    }
    uint8_t *buf = fc_malloc(raw);
    Dataset *d0 = dataset_open(good, err, sizeof err);
    int raw_clip = -1, zlib_clip = -1;
    for (int i = 0; d0 && i < dataset_clips(d0); i++) {
        ClipLocation loc;
        dataset_clip_location(d0, i, &loc);
        if (loc.zlib && zlib_clip < 0) zlib_clip = i;
        if (!loc.zlib && raw_clip < 0 && i > 0) raw_clip = i;
    }
    ClipLocation lr, lz;
    dataset_clip_location(d0, raw_clip, &lr);
    dataset_clip_location(d0, zlib_clip, &lz);
    char lr_shard[64], lz_shard[64];
    snprintf(lr_shard, sizeof lr_shard, "%s", lr.shard);
    snprintf(lz_shard, sizeof lz_shard, "%s", lz.shard);
    dataset_close(d0);

    // a flipped byte in a raw clip: the header still opens, the clip's CRC does not match
    snprintf(dir, sizeof dir, "%s/flip_raw", g_root);
    copy_dir(good, dir);
    snprintf(path, sizeof path, "%s/%s", dir, lr_shard);
    flip_byte(path, (long)(lr.offset + lr.stored / 2));
    Dataset *d = dataset_open(dir, err, sizeof err);
    int rc = d ? dataset_read_clip(d, raw_clip, buf, err, sizeof err) : 0;
    char want[64];
    snprintf(want, sizeof want, "clip.%d ", lr.index);
    check(d && rc == DATASET_CLIP_DAMAGED && one_line(err) && strstr(err, "CRC32 mismatch") && strstr(err, lr_shard) &&
              strstr(err, want),
          "shards_flipped_byte_raw", "%s", err);
    int others = 0;
    for (int i = 0; d && i < dataset_clips(d); i++)
        others += i != raw_clip && !dataset_read_clip(d, i, buf, err, sizeof err);
    check(d && others == dataset_clips(d) - 1, "shards_flipped_byte_other_clips_fine", "%d other clips read", others);
    size_t len;
    uint8_t *bytes = test_read_file(path, &len);
    rc = shard_check_bytes(bytes, len, err, sizeof err);
    check(rc == -1 && strstr(err, "CRC32"), "shard_check_bytes_flipped_byte", "%s", err);
    free(bytes);
    dataset_close(d);

    // a flipped byte in a zlib clip: an inflate or CRC error naming the clip and the shard
    snprintf(dir, sizeof dir, "%s/flip_zlib", g_root);
    copy_dir(good, dir);
    snprintf(path, sizeof path, "%s/%s", dir, lz_shard);
    flip_byte(path, (long)(lz.offset + lz.stored / 2));
    d = dataset_open(dir, err, sizeof err);
    rc = d ? dataset_read_clip(d, zlib_clip, buf, err, sizeof err) : 0;
    snprintf(want, sizeof want, "clip.%d ", lz.index);
    check(d && rc == DATASET_CLIP_DAMAGED && one_line(err) && strstr(err, lz_shard) && strstr(err, want),
          "shards_flipped_byte_zlib", "%s", err);
    dataset_close(d);

    // a truncated shard: refused at open, naming it
    snprintf(dir, sizeof dir, "%s/truncated", g_root);
    copy_dir(good, dir);
    snprintf(path, sizeof path, "%s/shard-00001.safetensors", dir);
    if (truncate(path, file_size(path) - 7)) abort();
    d = dataset_open(dir, err, sizeof err);
    check(!d && one_line(err) && strstr(err, "shard-00001.safetensors"), "shards_truncated_at_open", "%s", err);
    dataset_close(d);
    // truncated after opening: the read says so
    snprintf(dir, sizeof dir, "%s/truncated_later", g_root);
    copy_dir(good, dir);
    d = dataset_open(dir, err, sizeof err);
    snprintf(path, sizeof path, "%s/%s", dir, lr_shard);
    if (truncate(path, (off_t)lr.offset + 10)) abort();
    rc = d ? dataset_read_clip(d, raw_clip, buf, err, sizeof err) : 0;
    check(d && rc == -1 && one_line(err) && strstr(err, lr_shard) && strstr(err, "changed"),
          "shards_truncated_after_open", "%s", err);
    dataset_close(d);
    // grown after opening (bytes appended to the shard): the read says so too
    snprintf(dir, sizeof dir, "%s/grown_later", g_root);
    copy_dir(good, dir);
    d = dataset_open(dir, err, sizeof err);
    snprintf(path, sizeof path, "%s/%s", dir, lr_shard);
    FILE *grow = fopen(path, "ab");
    if (!grow || fwrite("0123456789", 1, 10, grow) != 10 || fclose(grow)) abort();
    rc = d ? dataset_read_clip(d, raw_clip, buf, err, sizeof err) : 0;
    check(d && rc == -1 && one_line(err) && strstr(err, lr_shard) && strstr(err, "changed"),
          "shards_grown_after_open", "%s", err);
    dataset_close(d);
    // a missing shard
    snprintf(dir, sizeof dir, "%s/missing", g_root);
    copy_dir(good, dir);
    snprintf(path, sizeof path, "%s/shard-00002.safetensors", dir);
    unlink(path);
    d = dataset_open(dir, err, sizeof err);
    check(!d && one_line(err) && strstr(err, "shard-00002.safetensors") && strstr(err, "cannot open"),
          "shards_missing_shard", "%s", err);
    dataset_close(d);
    // a FIFO in a shard's place, or dataset.json's: refused at once (a plain open would wait for a
    // writer forever; the alarm ends a test that hangs)
    const char *fifo_names[] = {"shard-00002.safetensors", "dataset.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(dir, sizeof dir, "%s/fifo_%d", g_root, i);
        copy_dir(good, dir);
        snprintf(path, sizeof path, "%s/%s", dir, fifo_names[i]);
        if (unlink(path) || mkfifo(path, 0644)) abort();
        alarm(10);
        d = dataset_open(dir, err, sizeof err);
        alarm(0);
        char label[64];
        snprintf(label, sizeof label, "shards_fifo_%s", i ? "dataset_json" : "shard");
        check(!d && one_line(err) && strstr(err, fifo_names[i]) && strstr(err, "not a regular file (a FIFO)"), label,
              "%s", err);
        dataset_close(d);
    }

    // a dataset.json beyond the largest read (a sparse file): refused by its size, before any reading
    snprintf(dir, sizeof dir, "%s/json_huge", g_root);
    copy_dir(good, dir);
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    if (truncate(path, (off_t)DATASET_JSON_MAX + 1)) abort();
    d = dataset_open(dir, err, sizeof err);
    check(!d && one_line(err) && strstr(err, "dataset.json") && strstr(err, "more than the"), "dataset_json_too_large",
          "%s", d ? "accepted" : err);
    dataset_close(d);

    // a shard copied over another of the same size and count of clips (raw clips: equal sizes), and
    // two such shards swapped: each refused at open, naming the shard whose header is not the listed
    // one; the same dataset.json without its header_crc32 keys (as prepared before they were
    // written) opens as before
    {
        char same[512], cmd[1600];
        folder(same, sizeof same, "equal_sizes");
        if (make_dataset(same, N, F, "rrrr", 2 * raw, NULL, NULL, err, sizeof err)) abort();
        snprintf(path, sizeof path, "%s/shard-00000.safetensors", same);
        char other[600];
        snprintf(other, sizeof other, "%s/shard-00001.safetensors", same);
        int equal = file_size(path) == file_size(other);
        const char *how[] = {"copied", "swapped"};
        for (int i = 0; i < 2; i++) {
            snprintf(dir, sizeof dir, "%s/shard_%s", g_root, how[i]);
            copy_dir(same, dir);
            if (i == 0)
                snprintf(cmd, sizeof cmd, "cp '%s/shard-00000.safetensors' '%s/shard-00001.safetensors'", dir, dir);
            else
                snprintf(cmd, sizeof cmd, "cd '%s' && mv shard-00000.safetensors x && mv shard-00001.safetensors "
                         "shard-00000.safetensors && mv x shard-00001.safetensors", dir);
            if (system(cmd)) abort();
            d = dataset_open(dir, err, sizeof err);
            char label[64];
            snprintf(label, sizeof label, "shards_%s_refused", i ? "swapped" : "copied_over_another");
            check(equal && !d && one_line(err) && strstr(err, i ? "shard-00000.safetensors" : "shard-00001.safetensors") &&
                      strstr(err, "not the shard dataset.json lists"),
                  label, "sizes %s; %s", equal ? "equal" : "differ", d ? "opened" : err);
            dataset_close(d);
        }
        snprintf(dir, sizeof dir, "%s/no_header_crc", g_root);
        copy_dir(same, dir);
        snprintf(cmd, sizeof cmd, "sed -i 's/, \"header_crc32\": \"[0-9a-f]*\"//' '%s/dataset.json'", dir);
        if (system(cmd)) abort();
        snprintf(path, sizeof path, "%s/dataset.json", dir);
        size_t jl;
        char *text = (char *)test_read_file(path, &jl);
        int stripped = text && !strstr(text, "header_crc32");
        free(text);
        d = dataset_open(dir, err, sizeof err);
        check(stripped && d && dataset_clips(d) == 4 && !dataset_read_clip(d, 3, buf, err, sizeof err),
              "shards_dataset_without_header_crcs_opens", "%s", !stripped ? "header_crc32 still there" : d ? "opened, clip 3 read" : err);
        dataset_close(d);
    }

    // damaged dataset.json: each refused with one line naming the file
    char json_path[600];
    snprintf(json_path, sizeof json_path, "%s/dataset.json", good);
    size_t jlen;
    char *json = (char *)test_read_file(json_path, &jlen);
    struct {
        const char *name, *from, *to, *expect;
        int cut;
        const char *from2, *to2;  // a second change, made after the first
    } cases[] = {
        {"truncated", NULL, NULL, "line", (int)jlen / 2},
        {"empty", NULL, NULL, "expected '{'", 1},
        {"wrong_bytes", "\"bytes\": ", "\"bytes\": 1", "dataset.json says", 0},
        {"wrong_clips_total", "\"clips\": 6,", "\"clips\": 7,", "'clips' says 7", 0},
        {"version_3", "\"format_version\": 1", "\"format_version\": 3", "format_version 3 is not supported", 0},
        {"unknown_key", "\"frame_size\"", "\"frame_sise\"", "unknown key 'frame_sise'", 0},
        {"path_in_name", "shard-00000", "../x/00000", "not a plain name", 0},
        {"negative", "\"clip_frames\": ", "\"clip_frames\": -", "non-negative", 0},
        {"float", "\"frame_size\": 16", "\"frame_size\": 16.0", "must be an integer", 0},
        {"trailing", " ]}\n", " ]}\n}", "after the dataset's object", 0},
        {"wrong_frame_size", "\"frame_size\": 16", "\"frame_size\": 8", "but dataset.json says", 0},
        // the same shard twice (the total still right): two entries would read the same clips
        {"shard_listed_twice", "\"file\": \"shard-00001", "\"file\": \"shard-00000", "listed twice", 0},
        {"hidden_name", "\"file\": \"shard-00000", "\"file\": \".shard-00000", "not a plain name", 0},
        // shards of 2 clips said to hold 3 and 1: the total is right, each shard's count is not
        {"header_crc_not_hex", "\"header_crc32\": \"", "\"header_crc32\": \"g", "8 lowercase hex digits", 0},
        {"header_crc_number", "\"header_crc32\": \"", "\"header_crc32\": 1\"", "'header_crc32' (a string)", 0},
        {"clips_moved_between_shards", "\"clips\": 2,", "\"clips\": 3,", "2 clips, but dataset.json says 3", 0,
         "\"clips\": 2,", "\"clips\": 1,"},
    };
    int ncases = sizeof cases / sizeof cases[0];
    for (int i = 0; i < ncases; i++) {
        snprintf(dir, sizeof dir, "%s/json_%s", g_root, cases[i].name);
        copy_dir(good, dir);
        snprintf(path, sizeof path, "%s/dataset.json", dir);
        char text[8192];
        size_t n = 0;
        if (cases[i].from) {
            const char *at = strstr(json, cases[i].from);
            size_t pre = (size_t)(at - json), fl = strlen(cases[i].from), tl = strlen(cases[i].to);
            memcpy(text, json, pre);
            memcpy(text + pre, cases[i].to, tl);
            memcpy(text + pre + tl, at + fl, jlen - pre - fl);
            n = jlen - fl + tl;
            if (cases[i].from2) {
                text[n] = 0;
                char *at2 = strstr(text + pre + tl, cases[i].from2);
                size_t f2 = strlen(cases[i].from2), t2 = strlen(cases[i].to2);
                memmove(at2 + t2, at2 + f2, n - (size_t)(at2 - text) - f2);
                memcpy(at2, cases[i].to2, t2);
                n = n - f2 + t2;
            }
        } else {
            n = (size_t)cases[i].cut - 1;
            memcpy(text, json, n);
        }
        write_text(path, text, n);
        d = dataset_open(dir, err, sizeof err);
        char label[96];
        snprintf(label, sizeof label, "dataset_json_%s", cases[i].name);
        check(!d && one_line(err) && strstr(err, "dataset.json") && strstr(err, cases[i].expect), label, "%s", err);
        dataset_close(d);
    }
    free(json);
    free(buf);
}

static void run_all(void) {
    test_crash_safety();
    test_corruption();
}

int main(void) { return run_in_scratch("shard_damage", run_all); }
