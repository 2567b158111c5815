// score.c: clips scored by a model's loss at fixed draws (see score.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chain/score.h"
#include "base/common.h"
#include "base/philox.h"
#include "dataset/clip_window.h"
#include "formats/safetensors.h"
#include "model/flow.h"
#include "model/model.h"
#include "train/checkpoint.h"

// The standard normal's p quantile, by bisection on its CDF (exact enough for a handful of levels).
static double normal_quantile(double p) {
    double lo = -12, hi = 12;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p) lo = mid; else hi = mid;
    }
    return 0.5 * (lo + hi);
}

// The motion statistics of one clip (score.h) from its bytes (F, N, N, 3), into s.
static void clip_motion(const uint8_t *clip, int F, int N, ClipScore *s) {
    size_t frame = (size_t)N * N * 3;
    double d1 = 0, d4 = 0;
    for (int f = 0; f + 1 < F; f++)
        for (size_t i = 0; i < frame; i++) d1 += abs((int)clip[(f + 1) * frame + i] - clip[f * frame + i]);
    for (int f = 0; f + 4 < F; f++)
        for (size_t i = 0; i < frame; i++) d4 += abs((int)clip[(f + 4) * frame + i] - clip[f * frame + i]);
    s->motion = F > 1 ? d1 / ((double)(F - 1) * frame) : 0;
    d4 = F > 4 ? d4 / ((double)(F - 4) * frame) : 0;
    // a flicker whose period divides 4 (black and white in turn) has no change 4 frames apart: as
    // unordered as motion gets, not unknown (which only a clip of 4 frames or fewer is)
    s->order = d4 > 0 ? s->motion / d4 : F > 4 && s->motion > 0 ? INFINITY : NAN;
    s->note = s->motion < SCORE_FROZEN_MOTION ? SCORE_NOTE_FROZEN
              : s->motion >= SCORE_UNORDERED_MOTION && s->order > SCORE_UNORDERED_ORDER ? SCORE_NOTE_UNORDERED
                                                                                        : SCORE_NOTE_NONE;
}

// The loss of every clip of d under the model of run (loss[i], NAN for a damaged clip; damaged[i] set),
// at the levels t[0 .. K-1]. 0, or -1 with err.
// stats: when not NULL, each clip's motion statistics (clip_motion) into stats[i].
static int model_losses(const char *run, const Dataset *d, const Backend *be, int B, const double *tk, int K,
                        double *loss, int *damaged, ClipScore *stats, char *err, size_t errlen) {
    char why[1024];
    int step, lo = 0;
    Model *m = checkpoint_load_for_generation(run, be, B, &step, NULL, why, sizeof why);
    if (!m) return fc_errf(err, errlen, "%s", why);
    if (clip_window_fits(&m->cfg, run, d, &lo, err, errlen)) {
        free_model(m);
        return -1;
    }
    const Config *c = &m->cfg;
    int F = c->slots, nclips = dataset_clips(d), S = m->S, rc = 0, targets = 0;
    size_t E = (size_t)m->E, W = (size_t)F * E;
    for (int f = 0; f < F; f++) targets += c->slot_kind[f] == SLOT_TARGET;
    uint8_t *raw = fc_malloc(dataset_clip_bytes(d));
    real *x0 = fc_malloc(sizeof(real) * W * B), *noise = fc_malloc(sizeof(real) * W * B);
    real *pred = fc_malloc(sizeof(real) * W * B), *v = fc_malloc(sizeof(real) * W * B);
    real *lev = fc_malloc(sizeof(real) * 3 * S);  // t, offset, mask
    real *x0_dev = be->alloc(sizeof(real) * W * B);
    int *batch_clip = fc_malloc(sizeof(int) * B);
    double *sum = fc_calloc((size_t)B, sizeof(double));
    for (int next = 0; next < nclips && !rc;) {
        if (fc_stop_signal()) {  // (cmd_score catches it: a stop ends here, nothing written)
            rc = fc_errf(err, errlen, "stopped by %s after %d of the %d clips: nothing written",
                         fc_signal_name(fc_stop_signal()), next, nclips);
            break;
        }
        int n = 0;  // windows filled in this batch
        while (n < B && next < nclips) {
            int k = next++, got = dataset_read_clip(d, k, raw, why, sizeof why);
            if (got == DATASET_CLIP_DAMAGED) {
                damaged[k] = 1, loss[k] = NAN;
                continue;
            }
            if (got) {
                rc = fc_errf(err, errlen, "%s", why);
                break;
            }
            clip_first_window(c, lo, raw, x0 + (size_t)n * W);
            if (stats) clip_motion(raw, dataset_clip_frames(d), dataset_frame_size(d), &stats[k]);
            batch_clip[n++] = k;
        }
        if (rc || !n) break;
        for (int w = n; w < B; w++) memcpy(x0 + (size_t)w * W, x0, sizeof(real) * W);  // padding, not scored
        flow_delta_targets(c, B, x0);
        be->upload(x0_dev, x0, sizeof(real) * W * B);
        memset(sum, 0, sizeof(double) * B);
        for (int k = 0; k < K; k++) {
            // the same draws for every window: keyed by the level, never by the clip
            philox_fill_normal(noise, W, 0, 1, SCORE_SEED, (uint32_t)k, RNG_NOISE, 0);
            for (int w = 1; w < B; w++) memcpy(noise + (size_t)w * W, noise, sizeof(real) * W);
            for (int s = 0; s < S; s++) {
                int f = s % F, target = c->slot_kind[f] == SLOT_TARGET;
                lev[s] = target ? (real)tk[k] : 0, lev[S + s] = c->slot_offset[f], lev[2 * S + s] = (real)target;
            }
            be->upload(m->in.t, lev, sizeof(real) * S);
            be->upload(m->in.offset, lev + S, sizeof(real) * S);
            be->upload(m->in.mask, lev + 2 * S, sizeof(real) * S);
            be->upload(m->in.noise, noise, sizeof(real) * W * B);
            be->flow_mix(m->in.xt, m->in.v, x0_dev, m->in.noise, m->in.t, S, (long)E);
            model_forward(m);
            be->download(pred, m->a.pred, sizeof(real) * W * B);
            be->download(v, m->in.v, sizeof(real) * W * B);
            for (int w = 0; w < n; w++) {  // model_loss's masked MSE, one window at a time
                double se = 0;
                for (int f = 0; f < F; f++) {
                    if (c->slot_kind[f] != SLOT_TARGET) continue;
                    const real *p = pred + (size_t)w * W + f * E, *q = v + (size_t)w * W + f * E;
                    for (size_t e = 0; e < E; e++) se += ((double)p[e] - q[e]) * ((double)p[e] - q[e]);
                }
                sum[w] += se / ((double)targets * E);
            }
        }
        for (int w = 0; w < n; w++) loss[batch_clip[w]] = sum[w] / K;
    }
    free(raw), free(x0), free(noise), free(pred), free(v), free(lev), free(batch_clip), free(sum);
    be->free(x0_dev);
    free_model(m);
    return rc;
}

static int by_score(const void *a, const void *b) {
    const ClipScore *x = a, *y = b;
    if (x->damaged != y->damaged) return x->damaged - y->damaged;
    if (!x->damaged && !x->note != !y->note) return x->note ? -1 : 1;
    if (!x->damaged && x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->clip - y->clip;
}

// Whether the reference run can be subtracted from o->run (whose config is c) on d: it loads, fits d,
// and scores the same windows against the same targets (the keys below), so that the two losses are of
// one thing. 0, or -1 with err.
static int reference_unfit(const ScoreOptions *o, const Config *c, const Dataset *d, const Backend *be, char *err,
                           size_t errlen) {
    static const char *const SAME[] = {"plan", "targets", "delta_scale", "delta_reference", "reference_zoom",
                                       "object_bounce", "reference_fill", "reference_fill_from",
                                       "anchor_snap"};
    char why[1024];
    int step, lo, rc = 0;
    Model *r = checkpoint_load_for_generation(o->reference, be, 1, &step, NULL, why, sizeof why);
    if (!r) return fc_errf(err, errlen, "--reference %s", why);
    if (clip_window_fits(&r->cfg, o->reference, d, &lo, err, errlen)) rc = -1;
    for (size_t i = 0; !rc && i < sizeof SAME / sizeof *SAME; i++) {
        char mine[1024], theirs[1024];
        config_get(c, SAME[i], mine, sizeof mine), config_get(&r->cfg, SAME[i], theirs, sizeof theirs);
        if (strcmp(mine, theirs))
            rc = fc_errf(err, errlen, "--reference %s: %s = %s, but %s has %s = %s: its loss is not of the same "
                         "windows and targets; give a reference trained with the same %s", o->reference, SAME[i],
                         theirs, o->run, SAME[i], mine, SAME[i]);
    }
    free_model(r);
    return rc;
}

int score_clips(const ScoreOptions *o, const Dataset *d, const Backend *be, ClipScore **scores, char *err,
                size_t errlen) {
    int n = dataset_clips(d), K = o->levels, B = o->batch;
    double tk[SCORE_MAX_LEVELS];
    if (K < 1 || K > SCORE_MAX_LEVELS || B < 1) return fc_errf(err, errlen, "score: %d levels, batch %d", K, B);
    if (B > n && n > 0) B = n;  // windows past the clips would be padding: their memory and passes wasted
    // the levels come from the scored run's config: read it once through a batch-1 model
    char why[1024];
    int step;
    Model *m = checkpoint_load_for_generation(o->run, be, 1, &step, NULL, why, sizeof why);
    if (!m) return fc_errf(err, errlen, "%s", why);
    for (int k = 0; k < K; k++)
        tk[k] = 1 / (1 + exp(-(m->cfg.t_logit_mean + m->cfg.t_logit_std * normal_quantile((k + 0.5) / K))));
    // the reference before any scoring: a reference that cannot be used would cost the run's whole pass
    int refused = o->reference && reference_unfit(o, &m->cfg, d, be, err, errlen);
    free_model(m);
    if (refused) return -1;
    double *loss = fc_malloc(sizeof(double) * n), *ref = fc_malloc(sizeof(double) * n);
    int *damaged = fc_calloc((size_t)n, sizeof(int));
    ClipScore *s = fc_malloc(sizeof(ClipScore) * (n ? n : 1));
    int rc = model_losses(o->run, d, be, B, tk, K, loss, damaged, s, err, errlen);
    if (!rc && o->reference) rc = model_losses(o->reference, d, be, B, tk, K, ref, damaged, NULL, err, errlen);
    if (!rc) {
        for (int i = 0; i < n; i++) {
            double r = o->reference && !damaged[i] ? ref[i] : NAN;
            ClipScore motion = s[i];
            s[i] = (ClipScore){i, damaged[i], damaged[i] ? NAN : loss[i], r,
                               damaged[i] ? NAN : o->reference ? loss[i] - r : loss[i], NAN, NAN, SCORE_NOTE_NONE};
            if (!damaged[i]) s[i].motion = motion.motion, s[i].order = motion.order, s[i].note = motion.note;
        }
        qsort(s, (size_t)n, sizeof *s, by_score);
        *scores = s;
    } else {
        free(s);
    }
    free(loss), free(ref), free(damaged);
    return rc;
}

char *score_tsv_text(const Dataset *d, const ClipScore *s, int n, int with_reference, size_t *len, char *err,
                     size_t errlen) {
    char *text = NULL, **origin = dataset_clip_origins(d, err, errlen);
    if (!origin) return NULL;
    size_t used = 0;
    FILE *out = open_memstream(&text, &used);  // grows as the lines come, however long their names
    if (!out) fc_die("out of host memory for the scores");
    int rc = 0;
    fprintf(out, "shard\tclip\tdataset_clip\tsource\tfirst_frame\tloss%s\tmotion\torder\tnote\n",
            with_reference ? "\tref_loss\tscore" : "");
    static const char *const NOTES[] = {"", "frozen", "unordered"};
    for (int i = 0; i < n; i++) {
        ClipLocation loc;
        if (dataset_clip_location(d, s[i].clip, &loc)) {
            rc = fc_errf(err, errlen, "%s: clip %d: no such clip", dataset_dir(d), s[i].clip);
            break;
        }
        fprintf(out, "%s\t%d\t%d\t%s", loc.shard, loc.index, s[i].clip, origin[s[i].clip]);
        if (s[i].damaged)
            fprintf(out, "\t%s\t\t\tdamaged\n", with_reference ? "\t\t" : "");
        else if (with_reference)
            fprintf(out, "\t%.6g\t%.6g\t%.6g\t%.4f\t%.4f\t%s\n", s[i].loss, s[i].ref_loss, s[i].score, s[i].motion,
                    s[i].order, NOTES[s[i].note]);
        else
            fprintf(out, "\t%.6g\t%.4f\t%.4f\t%s\n", s[i].loss, s[i].motion, s[i].order, NOTES[s[i].note]);
    }
    if (fclose(out) || !text) fc_die("out of host memory for the scores");
    dataset_clip_origins_free(origin, dataset_clips(d));
    if (rc) return free(text), NULL;
    *len = used;
    return text;
}

int score_write_tsv(const Dataset *d, const ClipScore *s, int n, int with_reference, const char *path, int overwrite,
                    char *err, size_t errlen) {
    size_t len;
    char *text = score_tsv_text(d, s, n, with_reference, &len, err, errlen);
    if (!text) return -1;
    int rc = st_write_output(path, text, len, overwrite, err, errlen);
    free(text);
    return rc;
}
