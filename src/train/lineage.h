// lineage.h: runs continued on purpose with a change. `train --extend --steps N` takes a finished
// (or unfinished) run past its end; `train --from RUN/ckpt-X.safetensors --run NEW` starts a new
// run from a checkpoint's weights, EMA and optimizer state with another config. Each writes a line
// into the run's lineage (TrainState.lineage), which every later checkpoint carries and `inspect`
// shows, so that a run can always say what was done to it.
#ifndef FRAMECHAIN_LINEAGE_H
#define FRAMECHAIN_LINEAGE_H

#include <stddef.h>

#include "base/config.h"

// How a train command starts, besides resuming its own checkpoints.
typedef struct {
    const char *from;    // --from: the parent checkpoint (NULL: not a fork)
    char parent[1200];   // its identity, "PATH (step N, crc32 XXXXXXXX)"
    int parent_step;
    int extend;          // --extend
    char data[1200];     // the data this command trains on (lineage_data_identity)
    char parent_data[1200];  // the parent's, from its metadata ("" when it has none)
    char note[2048];     // the lineage line this start adds ("": none)
} TrainOrigin;

// train --extend with c->steps the new end: reads the newest whole checkpoint of `run`, refuses an
// end below the one it was written with, and sets c->schedule_end so that the steps up to the old end
// keep their learning rates (the cosine ends where it ended, the rate then stays lr * lr_min_ratio).
// o->note: the extension's line, "" when the checkpoint already has this end (a rerun of the command).
// 0, or -1 with one line in err.
int lineage_extend(Config *c, const char *run, TrainOrigin *o, char *err, size_t errlen);

// train --from PATH: the parent's config (into *parent_cfg), step and identity (into o). 0, or -1 with
// one line in err (not a whole checkpoint).
int lineage_read_parent(const char *path, Config *parent_cfg, TrainOrigin *o, char *err, size_t errlen);

// train --from PATH, read (o from lineage_read_parent), where run's newest whole checkpoint names PATH
// as its parent with another step or CRC: the file at PATH was replaced since the fork was made (its
// parent's folder trained again). 1 with the identity the fork records, "(step N, crc32 X)", in
// recorded and the file's in now (each len bytes); else 0.
int lineage_parent_replaced(const char *run, const TrainOrigin *o, char *recorded, char *now, size_t len);

// train --from PATH when PATH cannot be read (a parent that went on training pruned it), or is no longer
// the fork's parent (lineage_parent_replaced): a rerun of
// the command resumes the fork from its own checkpoints. When run's newest whole checkpoint names PATH
// as its parent, its config (the command's --set already applied) stands in for the parent's and o
// holds the parent's identity as that checkpoint records it: 0; else -1 (nothing changed).
int lineage_resume_fork(const char *run, const char *from, Config *parent_cfg, TrainOrigin *o);

// The fork's line in o->note, naming the keys c changes against the parent's config; -1 with one line
// in err when one of them shapes the network (a fork keeps the network) or c ends at or before the
// parent's step.
int lineage_fork(const Config *parent_cfg, const Config *c, TrainOrigin *o, char *err, size_t errlen);

// A fork's run folder: 0 when it holds no checkpoint or those of this fork (a rerun of the command:
// it resumes), else -1 with one line in err.
int lineage_fork_folder(const char *run, const TrainOrigin *o, char *err, size_t errlen);
// Whether a checkpoint's parent metadata ("PATH (step N, crc32 X)") names --from: PATH as the
// checkpoints record it (non-ASCII bytes as '?', cut at 1100 bytes), so a fork from any path resumes.
int lineage_names_parent(const char *parent, const char *from);

// Whether a checkpoint's parent metadata names this fork's parent: --from as lineage_names_parent
// says, or the file o->parent identifies (its step and CRC-32) under another spelling of its path.
int lineage_is_fork_of(const char *parent, const TrainOrigin *o);

// What a run trains on, as checkpoints record it: "crc32 XXXXXXXX of DIR/dataset.json" for a prepared
// dataset (its content, wherever the folder is moved), "the built-in moving shapes" without one; with
// an exclude list (config key exclude: NULL or "" for none), "; excluding crc32 YYYYYYYY of FILE" after
// it (the list's content: a resume with another list is refused, a fork names the change).
#define LINEAGE_EXCLUDE_MARK "; excluding "
void lineage_data_identity(const char *data_dir, const char *exclude, char *id, size_t idlen);
// Whether two identities name the same data (the CRCs decide, not the paths: the dataset's and the
// exclude list's, where either has one); an empty one (a checkpoint from before identities were
// recorded) matches anything.
int lineage_same_data(const char *a, const char *b);
// An identity without its paths (the CRCs alone, where it has them): what ranks compare, each machine
// free to keep its copy of the dataset and exclude list at a path of its own.
void lineage_data_key(const char *id, char *out, size_t len);

// Append `line` to the lineage text (size bytes), dropping its oldest lines when it would not fit.
void lineage_append(char *lineage, size_t size, const char *line);

#endif
