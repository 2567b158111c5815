// object_motion.h: things that move on their own as whole pieces over a flat background. The frame
// is cut into its background (the largest region of like colour) and objects (the other regions of
// like colour); each object gets its own motion, and a reference is made by moving each
// object over the background. Used by delta_reference = objects (docs/network.md, "Conditioning"):
// moving shapes, cartoons, anything drawn over a plain ground, where one global motion moves the
// largest object and everything else with it.
#ifndef FRAMECHAIN_OBJECT_MOTION_H
#define FRAMECHAIN_OBJECT_MOTION_H

#include "base/common.h"

#define OBJECT_MAX 64       // objects tracked in one frame; a frame with more is no flat scene
#define OBJECT_MIN 3         // pixels of like colour that make an object; fewer join a neighbour
#define OBJECT_FLAT 0.04     // a flat background's standard deviation is under this in every channel
#define OBJECT_CHANNELS 64  // channels of a frame at most (config.c's limit)

// A frame (C, N, N) cut into its flat background and objects. label[p]: -1 on the background, else
// the object of pixel p (0 .. count - 1); count -1 where the frame has no flat background (no region
// of like colour covering a quarter of it, with a standard deviation under OBJECT_FLAT) or more
// than OBJECT_MAX objects: then nothing is tracked.
typedef struct {
    int N, count;
    int *label;                   // (N * N)
    double background[OBJECT_CHANNELS];  // the background's mean value in each channel
    int size[OBJECT_MAX];         // each object's pixels
    double dx[OBJECT_MAX], dy[OBJECT_MAX];  // each object's velocity, pixels a frame
} ObjectScene;

// Cut `frame` (C, N, N) into background and objects: neighbouring pixels whose values differ by
// under `tol` in every channel are one region (4-connected). The largest region is the background if
// it covers a quarter of the frame and is flat: its standard deviation under OBJECT_FLAT in every
// channel (a gradient chains into one region too: footage at 32x32 has 0.04-0.3, drawn shapes 0).
// Every other region of OBJECT_MIN pixels or more is an object; a smaller one (a soft edge, a speck)
// joins an object it touches, or stays with neither. Velocities zeroed.
void objects_segment(ObjectScene *s, const real *frame, int C, int N, double tol);

// The shift (dx, dy) of each object of s (cut from `to`) from frame `from`: the one minimising the
// mean squared difference of to(p) and from(p - d) (bilinear, clamped) over the object's pixels
// and the background pixels touching them, searched on whole pixels within N/4 and refined to 1/16
// pixel; (0, 0) unless it halves the difference of standing still. dx, dy: (count).
void objects_shift(const ObjectScene *s, const real *from, const real *to, int C, double *dx, double *dy);

// out (C, N, N) = `in` (the frame s was cut from) with every object moved by scale * its velocity:
// where a moving object stood, the background colour; then each moving object (largest first, so
// smaller ones stay in front) blended in where it lands, by its mask's coverage there (bilinear at
// the source p - scale * v): in's value at the source's nearest pixel where that is the object's,
// else the object's mean colour. Soft edges: a position known to a fraction of a pixel costs less
// as a blend than as a hard edge one pixel off. Still objects stay. bounce: each object's shift folded
// so that the box of its pixels stays in the frame, reflected at its edges (a thing that reaches a
// wall comes back off it, as the moving shapes do); else it goes on out of the frame.
void objects_carry(real *out, const real *in, const ObjectScene *s, int C, double scale, int bounce);

void objects_free(ObjectScene *s);

#endif
