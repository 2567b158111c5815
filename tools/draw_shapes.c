// draw_shapes.c: the built-in moving-shapes clip K (the one `--first-frame shapes:K` and `prepare
// --input shapes:K:N` start from) as numbered PNGs, frame-000000.png on: the truth that tools/strip.sh
// shows under a chain started from shapes:K.
//
// usage: build/draw_shapes K FRAMES SIZE DIR   (DIR must exist)
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/moving_shapes.h"
#include "video/video.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s K FRAMES SIZE DIR\n", argv[0]);
        return 2;
    }
    long clip = strtol(argv[1], NULL, 10), frames = strtol(argv[2], NULL, 10), S = strtol(argv[3], NULL, 10);
    if (clip < 0 || clip > 0xffffffffL || frames < 1 || S < 2 || S > 4096) {
        fprintf(stderr, "draw_shapes: K %s, FRAMES %s or SIZE %s out of range\n", argv[1], argv[2], argv[3]);
        return 2;
    }
    real *planes = fc_malloc(sizeof(real) * 3 * S * S);
    uint8_t *rgb = fc_malloc((size_t)3 * S * S);
    for (long k = 0; k < frames; k++) {
        shapes_frame(planes, 3, (int)S, 1, 0, (uint32_t)clip, (double)k);  // as sampler.c draws shapes:K
        frame_to_rgb(rgb, planes, (int)S);  // as generate writes a frame
        char path[4096];
        snprintf(path, sizeof path, "%s/frame-%06ld.png", argv[4], k);
        if (image_write_png(path, (int)S, (int)S, rgb)) {
            fprintf(stderr, "draw_shapes: %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    free(planes), free(rgb);
    return 0;
}
