// chain_plan.h: the long-video chain. From the three models' frame plans (config data), the order of
// windows that makes frames 0..N-1 from frame 0: the starter's window, then keyframes by
// extrapolation at the extrapolate plan's stride, and the gaps between keyframes by interpolation.
// Pure bookkeeping, no model: tests check it on its own (every frame made exactly once, no window
// reads a frame that does not exist yet).
#ifndef FRAMECHAIN_CHAIN_H
#define FRAMECHAIN_CHAIN_H

#include <stddef.h>

#include "base/config.h"

typedef struct {
    int role;               // enum Role: which model runs this window
    int n;                  // the window's reference frame (offset 0 of its plan)
    int slots;              // F of that model's plan
    int frame[MAX_SLOTS];   // video frame of each slot: read (anchor, context) or made (target)
    unsigned char kind[MAX_SLOTS];  // enum SlotKind of each slot
    float offset[MAX_SLOTS];  // the time offset the network is given for each slot
    int keep[MAX_SLOTS];    // 1 on a target slot whose frame is in 0..N-1 (made here, written out)
} ChainWindow;

typedef struct {
    int frames;       // N
    int last_frame;   // the highest frame any window makes (keyframes may lie past N-1)
    int count;
    ChainWindow *w;   // (count)
} ChainPlan;

// Check that the three plans fit together and list the windows for N frames (N >= 1 + the starter's
// last target). Returns 0, or -1 with one line in err naming the plan that does not fit.
int chain_build(ChainPlan *plan, const Config *starter, const Config *extrapolate, const Config *interpolate, int N,
                char *err, size_t errlen);
// The same, for a chain given its first `given` frames: 1 (frame 0, as chain_build), or the starter's
// whole window (1 + its last target), in which case the starter's window is left out, the
// extrapolate model starts from real frames and every window's anchor is the last given frame.
// Any other count is an error naming both choices.
int chain_build_given(ChainPlan *plan, const Config *starter, const Config *extrapolate, const Config *interpolate,
                      int N, int given, char *err, size_t errlen);
void chain_free(ChainPlan *plan);

// Each slot's true distance from the window's reference frame n: its offset, but the anchor's, whose
// offset is the plan's (what the network is told) and whose frame may lie elsewhere (farther back
// along a chain, nearer in the first window from 7 given frames): frame - n. The references measure
// time with these (flow.h).
void chain_window_distances(const ChainWindow *w, float *distance);

// Which window makes each frame and which reads it last, for holding frames only while they are
// needed: made[f] the window whose target f is (-1: a given frame, there before the first window),
// last_read[f] the last window with a slot on f, of any kind (-1: none). Arrays of last_frame + 1.
void chain_frame_use(const ChainPlan *plan, int *made, int *last_read);

#endif
