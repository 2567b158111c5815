// reflect.h: a point moving along a segment that bounces off both its ends (the moving shapes, the
// synthetic camera over its image, delta_reference objects' object_bounce).
#ifndef FRAMECHAIN_REFLECT_H
#define FRAMECHAIN_REFLECT_H

#include <math.h>

// p folded into [0, span] by reflection at both ends: where a point that has travelled p from 0
// stands; 0 where span <= 0 (no room to move).
static inline double reflect_fold(double p, double span) {
    if (!(span > 0)) return 0;
    double m = fmod(p, 2 * span);
    if (m < 0) m += 2 * span;
    return m <= span ? m : 2 * span - m;
}

#endif
