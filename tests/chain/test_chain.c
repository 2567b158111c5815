// test_chain.c: the long-video chain's window order (src/chain/chain_plan.c) for the shipped plans: every
// frame 0..N-1 is made exactly once, no window reads a frame that does not exist yet, each window
// gives the network the offsets the plan trained it on; plans that cannot chain are refused.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chain/chain_plan.h"
#include "chain/eval.h"
#include "chain/sampler.h"
#include "check.h"
#include "base/config.h"

static Config load(const char *dir, const char *role) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.conf", dir, role);
    Config c;
    config_defaults(&c);
    config_load(&c, path);
    config_validate(&c, path);
    return c;
}

// The known frame nearest to f (a tie: the earlier), as a context the video does not have yet is read.
static int nearest_known(const unsigned char *known, int last, int f) {
    int best = -1;
    for (int g = 0; g <= last; g++)
        if (known[g] && (best < 0 || abs(g - f) < abs(best - f))) best = g;
    return best;
}

// Walk the windows in order, frames 0..given-1 known at the start, every anchor the last of them;
// returns a description of the first violation, or NULL. Also checks chain_frame_use against the
// windows: which one makes each frame and which reads it last.
static const char *walk(const ChainPlan *p, const Config *cfg[3], int N, int given, char *why, size_t len) {
    unsigned char *known = calloc((size_t)p->last_frame + 1, 1);
    int *made = calloc((size_t)N, sizeof(int));
    int *maker = malloc(sizeof(int) * (p->last_frame + 1)), *reader = malloc(sizeof(int) * (p->last_frame + 1));
    int *use_made = malloc(sizeof(int) * (p->last_frame + 1)), *use_read = malloc(sizeof(int) * (p->last_frame + 1));
    for (int f = 0; f <= p->last_frame; f++) maker[f] = reader[f] = -1;
    memset(known, 1, (size_t)given);
    const char *bad = NULL;
    for (int k = 0; k < p->count && !bad; k++) {
        const ChainWindow *w = &p->w[k];
        const Config *c = cfg[w->role];
        if (w->slots != c->slots) bad = "slot count differs from the plan";
        for (int i = 0; i < w->slots && !bad; i++) {
            int f = w->frame[i];
            if (f < 0 || f > p->last_frame) {
                snprintf(why, len, "window %d slot %d: frame %d out of range", k, i, f);
                bad = why;
            } else if (c->slot_kind[i] != SLOT_TARGET) {
                if (!known[f]) snprintf(why, len, "window %d (%s at n=%d) reads frame %d before it exists", k,
                                        config_role_name(w->role), w->n, f), bad = why;
                if (c->slot_kind[i] == SLOT_ANCHOR && (f != given - 1 || w->offset[i] != c->slot_offset[i]))
                    snprintf(why, len, "window %d: the anchor is frame %d offset %g", k, f, w->offset[i]), bad = why;
                if (c->slot_kind[i] == SLOT_CONTEXT && w->offset[i] != (float)(f - w->n))
                    snprintf(why, len, "window %d: context offset %g for frame %d at n=%d", k, w->offset[i], f, w->n),
                        bad = why;
                // A context reads its planned frame n + offset, or where the video does not have that
                // frame yet, the known frame nearest to it.
                int planned = w->n + (int)c->slot_offset[i];
                int want = planned >= 0 && planned <= p->last_frame && known[planned]
                               ? planned : nearest_known(known, p->last_frame, planned);
                if (c->slot_kind[i] == SLOT_CONTEXT && f != want)
                    snprintf(why, len, "window %d (%s at n=%d): context planned at frame %d reads frame %d, not %d", k,
                             config_role_name(w->role), w->n, planned, f, want), bad = why;
            } else {
                if (known[f]) snprintf(why, len, "window %d makes frame %d again", k, f), bad = why;
                if (w->offset[i] != c->slot_offset[i])
                    snprintf(why, len, "window %d: target offset %g, plan %g", k, w->offset[i], c->slot_offset[i]),
                        bad = why;
                if (w->keep[i] != (f < N)) snprintf(why, len, "window %d: keep flag of frame %d", k, f), bad = why;
                if (f < N) made[f]++;
            }
        }
        for (int i = 0; i < w->slots; i++)
            if (w->frame[i] >= 0 && w->frame[i] <= p->last_frame) {
                reader[w->frame[i]] = k;
                if (c->slot_kind[i] == SLOT_TARGET) known[w->frame[i]] = 1, maker[w->frame[i]] = k;
            }
    }
    for (int f = given; f < N && !bad; f++)
        if (made[f] != 1) snprintf(why, len, "frame %d made %d times", f, made[f]), bad = why;
    chain_frame_use(p, use_made, use_read);
    for (int f = 0; f <= p->last_frame && !bad; f++)
        if (use_made[f] != maker[f] || use_read[f] != reader[f])
            snprintf(why, len, "chain_frame_use: frame %d made by window %d and read last by %d, not %d and %d", f,
                     use_made[f], use_read[f], maker[f], reader[f]), bad = why;
    free(known), free(made), free(maker), free(reader), free(use_made), free(use_read);
    return bad;
}

// The most frames a chain must hold at once, worked out from the plan as the spec says it (sampler.h,
// chain_sample_stream): the given frames from the start; each window's targets from that window on; a
// frame let go once it is handed on (frames 0..N-1, in order, each as soon as it and every frame
// before it are made; frames past N-1 never are) and no window after it reads it.
static int frames_needed(const ChainPlan *p) {
    int n = p->last_frame + 1, *made = malloc(sizeof(int) * n), *last_read = malloc(sizeof(int) * n);
    unsigned char *held = calloc((size_t)n, 1);
    chain_frame_use(p, made, last_read);
    int count = 0, peak = 0, next = 0;
    for (int f = 0; f < p->frames; f++)
        if (made[f] < 0) held[f] = 1, count++;
    for (int k = -1; k < p->count; k++) {
        if (k >= 0)
            for (int i = 0; i < p->w[k].slots; i++)
                if (p->w[k].kind[i] == SLOT_TARGET && !held[p->w[k].frame[i]]) held[p->w[k].frame[i]] = 1, count++;
        peak = count > peak ? count : peak;
        while (next < p->frames && made[next] <= k) next++;  // handed on
        for (int f = 0; f < n; f++)
            if (held[f] && (f < next || f >= p->frames) && last_read[f] <= k) held[f] = 0, count--;
    }
    free(made), free(last_read), free(held);
    return peak;
}

int main(void) {
    const char *dirs[] = {"configs/tiny", "configs/small", "configs"};
    int idle = 0, idle_n11 = -1;
    char idle_why[200] = "";
    for (int d = 0; d < 3; d++) {
        Config st = load(dirs[d], "starter"), ex = load(dirs[d], "extrapolate"), in = load(dirs[d], "interpolate");
        const Config *cfg[3] = {&st, &ex, &in};
        int Ns[] = {7, 8, 11, 18, 19, 20, 31, 181, 1000, 4097};
        int bad_count = 0, total = 0, windows_181 = 0;
        char why[256], first_bad[300] = "";
        for (size_t i = 0; i < sizeof Ns / sizeof Ns[0] + 200; i++) {
            int N = i < sizeof Ns / sizeof Ns[0] ? Ns[i] : 7 + (int)((i * 2654435761u) % 600);
            ChainPlan p;
            char err[256];
            total++;
            if (chain_build(&p, &st, &ex, &in, N, err, sizeof err)) {
                snprintf(first_bad, sizeof first_bad, "N=%d: %s", N, err);
                bad_count++;
                continue;
            }
            const char *bad = walk(&p, cfg, N, 1, why, sizeof why);
            if (bad && !bad_count++) snprintf(first_bad, sizeof first_bad, "N=%d: %s", N, bad);
            if (N == 181) windows_181 = p.count;
            // A starter or interpolate window whose targets all lie past N-1 makes nothing kept: the
            // interpolate windows stop at the gap whose first frame is N or later. (An extrapolate
            // window may keep none: its keyframes past N-1 are the far context of the last gaps.)
            for (int k = 0; k < p.count; k++) {
                const ChainWindow *w = &p.w[k];
                int kept = 0;
                for (int s = 0; s < w->slots; s++) kept += w->kind[s] == SLOT_TARGET && w->keep[s];
                if (w->role != ROLE_EXTRAPOLATE && !kept && !idle++)
                    snprintf(idle_why, sizeof idle_why, "%s: N=%d: %s window at n=%d keeps no frame", dirs[d], N,
                             config_role_name(w->role), w->n);
            }
            chain_free(&p);
        }
        char name[64];
        snprintf(name, sizeof name, "chain_plans_%s", dirs[d]);
        for (char *c = name; *c; c++) if (*c == '/') *c = '_';
        check(bad_count == 0, name, "%d frame counts (7 to 4097): every frame made once, no read ahead, offsets as "
              "trained; 181 frames take %d windows%s%s", total, windows_181, bad_count ? "; " : "", first_bad);
    }
    // 11 frames (the shipped plans: starter to 6, keyframes 10, 14, 18): frames 7-9 are the one gap
    // interpolated; the gap after keyframe 10 (frames 11-13) is wholly past N-1 and gets no window
    {
        Config st = load("configs/tiny", "starter"), ex = load("configs/tiny", "extrapolate"),
               in = load("configs/tiny", "interpolate");
        ChainPlan p;
        char err[256];
        if (!chain_build(&p, &st, &ex, &in, 11, err, sizeof err)) {
            idle_n11 = 0;
            for (int k = 0; k < p.count; k++) idle_n11 += p.w[k].role == ROLE_INTERPOLATE;
            chain_free(&p);
        }
    }
    check(!idle && idle_n11 == 1, "chain_no_idle_windows", "every starter and interpolate window keeps a frame "
          "below N, over the three plan sets' frame counts; 11 frames take %d interpolate windows (1)%s%s", idle_n11,
          idle ? "; " : "", idle_why);

    // Plans that cannot chain are refused with a line naming the plan.
    Config st = load("configs/tiny", "starter"), ex = load("configs/tiny", "extrapolate"),
           in = load("configs/tiny", "interpolate");
    struct { const char *what, *key, *value, *expect; int which; } bad[] = {
        {"wrong role", "role", "interpolate", "trained as role = interpolate", 1},
        {"stride mismatch", "plan", "anchor:-8 context:-1 context:0 context:5 target:1 target:2 target:3 target:4",
         "at 0 and at 4", 2},
        {"starter with context", "plan", "anchor:0 context:-1 target:1 target:2", "context slots", 0},
        {"starter gap", "plan", "anchor:0 target:1 target:3", "in a row", 0},
        {"uneven keyframes", "plan", "anchor:-12 context:0 target:4 target:9", "s, 2s, 3s", 1},
        {"extrapolate without context at 0", "plan", "anchor:-12 context:-4 target:4 target:8 target:12",
         "context slot at offset 0", 1},
        {"extrapolate with context after 0", "plan", "anchor:-12 context:0 context:2 target:4 target:8 target:12",
         "none after it", 1},
        {"other frame size", "frame_size", "64", "different sizes", 2},
        // an offset between frames: no video frame sits there (truncated, 2.5 would pass as target 2)
        {"fractional offset", "plan", "anchor:-8 context:-1 context:0 context:4 target:1 target:2.5 target:3",
         "offset 2.5 is not a whole frame", 2},
        // the starter starts from the first frame itself: an anchor before it is a frame the video lacks
        {"starter anchor not at 0", "plan", "anchor:-1 target:1 target:2 target:3 target:4 target:5 target:6",
         "anchor must be at offset 0", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Config c[3] = {st, ex, in};
        char kv[256], err[256] = "";
        snprintf(kv, sizeof kv, "%s=%s", bad[i].key, bad[i].value);
        config_set(&c[bad[i].which], kv, "test");
        ChainPlan p;
        int rc = chain_build(&p, &c[0], &c[1], &c[2], 181, err, sizeof err);
        if (!rc) chain_free(&p);
        char name[64];
        snprintf(name, sizeof name, "chain_refuses_%s", bad[i].what);
        for (char *ch = name; *ch; ch++) if (*ch == ' ') *ch = '_';
        check(rc == -1 && strstr(err, bad[i].expect), name, "%s", rc ? err : "accepted");
    }
    ChainPlan p;
    char err[256] = "";
    // A context halfway across a gap (offset 2 of stride 4) when only the keyframes around the gap are
    // known: frames n and n + 4 are equally near, and the tie goes to the earlier one, frame n, so that
    // every such window reads the keyframe its own gap starts from (and walk's reading agrees).
    {
        Config mid = in;
        config_set(&mid, "plan=anchor:-8 context:0 context:2 context:4 target:1 target:2 target:3", "test");
        const Config *mcfg[3] = {&st, &ex, &mid};
        int tie_bad = 0, ties = 0;
        char tie_why[200] = "";
        if (!chain_build(&p, &st, &ex, &mid, 181, err, sizeof err)) {
            for (int k = 0; k < p.count; k++) {
                const ChainWindow *w = &p.w[k];
                if (w->role != ROLE_INTERPOLATE) continue;
                for (int i = 0; i < w->slots; i++)
                    if (w->kind[i] == SLOT_CONTEXT && mid.slot_offset[i] == 2) {
                        ties++;
                        if ((w->frame[i] != w->n || w->offset[i] != 0) && !tie_bad++)
                            snprintf(tie_why, sizeof tie_why, "; window %d at n=%d reads frame %d (offset %g)", k,
                                     w->n, w->frame[i], w->offset[i]);
                    }
            }
            char walk_why[160];
            const char *bad = walk(&p, mcfg, 181, 1, walk_why, sizeof walk_why);
            if (bad && !tie_bad++) snprintf(tie_why, sizeof tie_why, "; %s", bad);
            chain_free(&p);
        } else tie_bad = 1, snprintf(tie_why, sizeof tie_why, "; %s", err);
        check(!tie_bad && ties > 0, "chain_context_tie_to_earlier", "181 frames, a context at offset 2 of a gap 4 "
              "wide: %d such slots, each reading the gap's first keyframe (frame n, offset 0)%s", ties, tie_why);
    }
    int rc = chain_build(&p, &st, &ex, &in, 6, err, sizeof err);
    check(rc == -1 && strstr(err, "at least 7"), "chain_refuses_too_few_frames", "%s", rc ? err : "accepted");

    // Started from the starter's whole window (eval --given 7): no starter window, every other frame
    // made once from frames that exist, every anchor frame 6; other counts are refused.
    const Config *cfg[3] = {&st, &ex, &in};
    int given_bad = 0, starter_windows = 0;
    char why[256] = "", first_bad[300] = "";
    for (int N = 7; N <= 400; N += 7) {
        if (chain_build_given(&p, &st, &ex, &in, N, 7, err, sizeof err)) {
            if (!given_bad++) snprintf(first_bad, sizeof first_bad, "N=%d: %s", N, err);
            continue;
        }
        for (int k = 0; k < p.count; k++) starter_windows += p.w[k].role == ROLE_STARTER;
        const char *bad = walk(&p, cfg, N, 7, why, sizeof why);
        if (bad && !given_bad++) snprintf(first_bad, sizeof first_bad, "N=%d: %s", N, bad);
        chain_free(&p);
    }
    check(given_bad == 0 && starter_windows == 0, "chain_given_first_window",
          "7 to 399 frames from 7 given: no starter window (%d), every frame after them made once, anchored on "
          "frame 6%s%s", starter_windows, given_bad ? "; " : "", first_bad);
    // chain_frames_held, the buffers generate allocates before its first window: what the plan needs
    int held_bad = 0, held_181 = 0;
    char held_why[200] = "";
    for (int g = 1; g <= 7; g += 6)
        for (int N = 61; N <= 2400; N = N * 3 - 2) {
            if (chain_build_given(&p, &st, &ex, &in, N, g, err, sizeof err)) continue;
            int want = frames_needed(&p), got = chain_frames_held(&p);
            if (g == 1 && N == 181) held_181 = got;
            if (got != want && !held_bad++) snprintf(held_why, sizeof held_why, "; N=%d from %d: %d, needed %d", N, g, got, want);
            chain_free(&p);
        }
    check(!held_bad && held_181 > 0, "chain_frames_held", "the frames held at once are those the plan needs, 61 to "
          "1621 frames from 1 and from 7 given (181 from 1: %d)%s", held_181, held_why);
    // chain_window_distances: the anchor's true distance (frame 6 from 7 given, however far the window),
    // every other slot's the offset the network is told
    int dist_bad = 0, far_anchor = 0;
    char dist_why[200] = "";
    if (!chain_build_given(&p, &st, &ex, &in, 400, 7, err, sizeof err)) {
        for (int k = 0; k < p.count; k++) {
            float d[MAX_SLOTS];
            const ChainWindow *w = &p.w[k];
            chain_window_distances(w, d);
            for (int i = 0; i < w->slots; i++) {
                int anchor = w->kind[i] == SLOT_ANCHOR;
                float want = anchor ? (float)(6 - w->n) : w->offset[i];
                if (anchor && w->frame[i] != 6) want = NAN;
                far_anchor += anchor && d[i] < w->offset[i];
                if (!(d[i] == want) && !dist_bad++)
                    snprintf(dist_why, sizeof dist_why, "; window %d slot %d: %g, expected %g", k, i, d[i], want);
            }
        }
        chain_free(&p);
    } else dist_bad = 1, snprintf(dist_why, sizeof dist_why, "; %s", err);
    check(!dist_bad && far_anchor > 0, "chain_window_distances", "400 frames from 7 given: every anchor at frame 6 "
          "less the window's n (%d windows with it farther back than the plan's offset), the other slots their "
          "offsets%s", far_anchor, dist_why);
    rc = chain_build_given(&p, &st, &ex, &in, 48, 3, err, sizeof err);
    check(rc == -1 && strstr(err, "1 (the first frame) or 7"), "chain_refuses_given_count", "%s",
          rc ? err : "accepted");
    // eval --noise-aug: -0 is the level 0 (a table row named "0", not "-0", and the same level as "0")
    double levels[4];
    int nl = eval_parse_levels("-0,0.1", 0.95, levels, 4, err, sizeof err);
    int twice = eval_parse_levels("0,-0", 0.95, levels + 2, 2, err, sizeof err);
    check(nl == 2 && levels[0] == 0 && !signbit(levels[0]) && twice == -1 && strstr(err, "level 0 given twice"),
          "eval_levels_minus_zero", "'-0,0.1': %d levels, the first %s; '0,-0': %s", nl,
          nl == 2 && !signbit(levels[0]) ? "0" : "-0", twice == -1 ? err : "accepted");
    // as many levels as plot --eval tells apart (18: report/plot_eval.c asserts it), and no more:
    // "0,0.05,...,0.90" is 19
    char many[256] = "0";
    double all[EVAL_MAX_LEVELS + 1];
    for (int l = 1; l <= 18; l++) snprintf(many + strlen(many), sizeof many - strlen(many), ",0.%02d", 5 * l);
    int fit = eval_parse_levels(many + 2, 0.95, all, EVAL_MAX_LEVELS, err, sizeof err);  // 0.05 .. 0.90: 18 levels
    int over = eval_parse_levels(many, 0.95, all, EVAL_MAX_LEVELS, err, sizeof err);
    check(fit == 18 && over == -1 && strstr(err, "at most 18 levels"), "eval_levels_as_many_as_plot",
          "EVAL_MAX_LEVELS %d; %d levels read from 18, 19: %s", EVAL_MAX_LEVELS, fit, over == -1 ? err : "accepted");
    return g_failed ? 1 : 0;
}
