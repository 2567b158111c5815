// synthetic.h: footage whose truth is known to any length, for evaluating the chain where the
// motion is determined by what it is given. `framechain prepare` takes these as inputs:
//   shapes:K:N     the built-in moving-shapes clip K (moving_shapes.h; the clip `generate
//                  --first-frame shapes:K` starts from), N frames
//   pan:IMAGE:N    a camera panning at a constant 0.5 pixel a frame over IMAGE, which fills a square
//                  of twice the frame size, bouncing off its edges; the direction is a pure function
//                  of IMAGE's name; N frames
//   zoom:IMAGE:N   a camera zooming in and out over IMAGE (the same square): the crop's side goes from
//                  the frame size to twice it and back, exponentially, about a point of the image that
//                  stays where it is on the screen, a point half the frame from it moving 0.25 pixel
//                  a frame (44 frames from one end to the other at any size); the point, the first
//                  side and the direction are pure functions of IMAGE's name; N frames
#ifndef FRAMECHAIN_SYNTHETIC_H
#define FRAMECHAIN_SYNTHETIC_H

#include <stddef.h>
#include <stdint.h>

#define SYNTHETIC_MAX_FRAMES 1000000
#define SYNTHETIC_PAN_SPEED 0.5   // pixels a frame
#define SYNTHETIC_ZOOM_SPEED 0.25 // pixels a frame, of a point half the frame from a zoom's still point

typedef struct SyntheticSource SyntheticSource;

// 1 when text names a synthetic source (starts with shapes:, pan: or zoom:), else 0.
int synthetic_is_spec(const char *text);
// The spec's form alone (its frame count, a shapes clip number, an image named), nothing read:
// 0, or -1 with one line in err naming the spec and what is wrong.
int synthetic_check_spec(const char *spec, char *err, size_t errlen);
// The source for frames of size x size. NULL with one line in err naming the spec and what is wrong.
SyntheticSource *synthetic_open(const char *spec, int size, char *err, size_t errlen);
// 1 when specs a and b make the same frames: shapes:1:N and shapes:01:N; pan:x.png:N and
// pan:./x.png:N (the same file under the same file name: the motion is a function of the name).
int synthetic_same(const char *a, const char *b);
int synthetic_frames(const SyntheticSource *s);
// pan: and zoom:, the IMAGE's shorter side in its own pixels (it fills a square of twice the frame
// size: under that, its frames are upscaled); shapes: 0.
int synthetic_image_side(const SyntheticSource *s);
// Frame `index` (0 .. synthetic_frames - 1) as (size, size, 3) RGB.
void synthetic_frame(const SyntheticSource *s, int index, uint8_t *rgb);
void synthetic_close(SyntheticSource *s);

#endif
