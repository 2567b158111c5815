// moving_shapes.h: the built-in moving-shapes dataset. Every window is a pure function of
// (seed, step, window index), so a resumed run sees exactly the samples of the uninterrupted one,
// and any frame of a clip can be drawn on its own (the plans ask for frames like n+12).
#ifndef FRAMECHAIN_SHAPES_H
#define FRAMECHAIN_SHAPES_H

#include <stdint.h>

#include "base/common.h"
#include "base/config.h"

#define SHAPES_MAX 3

// One disc (or square: r is half its side) of a clip at one time: its centre (x, y) in pixels from
// the frame's top-left corner, its colour in [-1, 1].
typedef struct {
    double x, y, r, colour[3];
    int square;
} Shape;

// The shapes of frame `time` of clip `clip` of (seed, step) at S x S pixels, in the order they are
// drawn (later over earlier), and the background colour bg (3): their count, 1 to SHAPES_MAX.
int shapes_at(Shape *sh, double *bg, int S, uint64_t seed, uint32_t step, uint32_t clip, double time);

// Draw frame `time` (in frames, any real number) of clip `clip` of (seed, step): (C, S, S) values
// in [-1, 1]. Each clip has a background colour and 1 to 3 discs and squares of their own colour,
// size and velocity, bouncing off the walls.
void shapes_frame(real *out, int C, int S, uint64_t seed, uint32_t step, uint32_t clip, double time);

// The clean windows of one step for a config's plan: (B, F, C, S, S), host memory. Window b is a
// clip of (seed, step, b0 + b) seen at the plan's slot offsets (plus a random start time in the clip):
// the windows b0 .. b0 + B - 1 of the step's global batch (flow.h).
void shapes_batch(real *out, const Config *c, int B, int b0, uint64_t seed, uint32_t step);

#endif
