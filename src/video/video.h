// video.h: the program's only contact with FFmpeg and stb_image. Reading videos and still images as
// square RGB frames, writing videos and PNGs.
//
// Every function reports failure through its return value and one line in err (naming the file and
// what is wrong); none of them exits or prints, so a caller can skip a bad input and go on. FFmpeg's
// own logging is silenced the first time any of them runs.
//
// The square frame: the source is cropped to the centred square of its shorter side (in display
// geometry: a non-square sample aspect ratio is honoured) and that square is resampled to size x size
// with swscale, SWS_AREA when shrinking and SWS_BICUBIC when enlarging. This gives the same result as
// "scale so that the shorter side becomes size, then crop the centre", without scaling the part that
// is thrown away. A rotation of 90/180/270 degrees stored in the stream (phone videos) is applied, and
// a mirror stored there too (a front camera, an editor's flip), as FFmpeg's command-line tool and
// players apply them. A pixel format with alpha is composited over black first (scale.h).
// Output rows are top to bottom, pixels R, G, B, no padding.
#ifndef FRAMECHAIN_VIDEO_H
#define FRAMECHAIN_VIDEO_H

#include <stddef.h>
#include <stdint.h>

#include "base/common.h"  // real

// The largest frame side video_next_frame and image_load_square accept for `size`.
#define VIDEO_MAX_SIZE 8192

typedef struct VideoReader VideoReader;

// Open any video FFmpeg's libraries read (local files only: the path is never taken as a URL). The
// stream is FFmpeg's best video stream that is not a cover picture. A PNG or JPEG also opens, as one
// frame, within image_load_square's size limit (image_check_size): test is_image_path first where
// stills are handled apart. NULL on failure with one line in
// err, e.g. "PATH: not a video (no video stream)", "PATH: cannot open: No such file or directory",
// "PATH: cannot open: unknown format or damaged file", "PATH: unsupported codec XYZ (...)".
VideoReader *video_open(const char *path, char *err, size_t errlen);
// The stream's stored frame size (before any rotation or sample aspect ratio).
int video_width(const VideoReader *v);
int video_height(const VideoReader *v);
// The stream's average frame rate, else its r_frame_rate, else 25 (when neither is in (0, 1000]).
double video_fps(const VideoReader *v);
// The stream's clock tick in seconds (its time base): each frame's time is rounded to it; 0 unknown.
double video_time_tick(const VideoReader *v);
// The container's frame count, else duration x fps; -1 when neither is known.
long video_frame_count_estimate(const VideoReader *v);
// The rotation applied to the frames, clockwise degrees: 0, 90, 180 or 270; when video_mirrored, after
// a left-right mirror (an upside-down flip is the mirror and 180).
int video_rotation(const VideoReader *v);
int video_mirrored(const VideoReader *v);

// Decode the next frame as size x size RGB24 (rgb: size*size*3 bytes). *time_s (may be NULL) is its
// presentation time in seconds from the stream's start time (else from its first frame); times
// strictly increase (a missing, repeated or backwards timestamp becomes the previous time + 1/fps).
// Returns 1 with a frame, 0 at the end of the stream, -1 on an error (one line in err, naming the
// file, the frames read and the time). Damage the decoder detects is an error (FFmpeg's
// AV_EF_EXPLODE), not a concealed picture: the frames returned before it are good, none after it
// comes. A file cut short fails (-1) where it ends, or, where the container takes the cut for the end
// (Matroska, WebM), after its last frame when that is well short (under 95%) of the frame count or
// duration its header states ("...: the file looks cut short"); a container that states no length
// (MPEG-TS) ends early (0). After 0 or -1 every later call returns the same. `size` may change between calls.
int video_next_frame(VideoReader *v, int size, uint8_t *rgb, double *time_s, char *err, size_t errlen);
// Frames returned so far.
long video_frames_read(const VideoReader *v);
// Pictures left out before the first key picture of an HEVC stream that begins mid-stream (its first
// packet no key: a recording started at any point, a cut without re-encoding), whose references the
// file does not hold: the decoder makes them a flat grey and flags nothing.
long video_frames_skipped(const VideoReader *v);
void video_close(VideoReader *v);

// Decoder threads for readers opened after this call (1 by default; 0 lets FFmpeg choose). Not
// thread-safe: call it before opening readers from several threads.
void video_set_decoder_threads(int n);

// A PNG or JPEG (stb_image: 8- and 16-bit PNG, gray, gray+alpha, RGB, RGBA, palette; baseline and
// progressive JPEG), as size x size RGB24 cropped and resampled as above with the same swscale path.
// Gray is replicated to R, G, B; alpha is composited over black (each colour times alpha / 255,
// rounded, at the image's own size: the colour stored under a transparent pixel never shows; video
// frames with alpha the same, scale.h). A JPEG's EXIF orientation (1-8, mirrors included) is applied;
// a damaged Exif block is ignored. Up to 100 megapixels. A JPEG Huffman table with over 256 codes is
// refused before stb_image sees it (stb_image 2.27 writes out of bounds on one). Returns 0, or -1 with
// one line in err.
int image_load_square(const char *path, int size, uint8_t *rgb, char *err, size_t errlen);
// The same, but an image smaller than min_side on either side is refused (one line in err) instead
// of being upscaled.
int image_load_square_min(const char *path, int size, int min_side, uint8_t *rgb, char *err, size_t errlen);
// The same as image_load_square, and *w x *h = the image's size as shown (its EXIF orientation
// applied), before the resampling.
int image_load_square_size(const char *path, int size, uint8_t *rgb, int *w, int *h, char *err, size_t errlen);
// For a PNG or JPEG read by another decoder (video_open: FFmpeg, which allocates the frame a header
// claims, or says only "no frame size"): -1 with image_load_square's line in err ("PATH: a PNG of
// 100000x100000 pixels, too large to read (at most 100000000 pixels)") when its header claims more
// than image_load_square takes; else 0, also for a file that is no PNG or JPEG (the caller's decoder
// has its say). Judged by the file's first bytes, whatever its name.
int image_check_size(const char *path, char *err, size_t errlen);
// Whether a path's extension is .png, .jpg or .jpeg (any case).
int is_image_path(const char *path);
// Write w x h RGB24 as a PNG, every write checked and the file fsynced (a full disk is an error, not
// an empty file); a file that failed is removed. 0, or -1 with errno set.
int image_write_png(const char *path, int w, int h, const uint8_t *rgb);

// Frame conversions between the network's [-1, 1] planes (3, S, S) and RGB24 (S, S, 3); RGB is
// rounded to nearest and clamped (frame_convert.c, built with or without FFmpeg).
void frame_from_rgb(real *dst, const uint8_t *rgb, int S);
void frame_to_rgb(uint8_t *rgb, const real *src, int S);

// A GIF's frame delays are whole hundredths of a second, and players show delays under 2 as 10: a .gif
// plays at most 50 frames a second (video_writer_open refuses more).
#define VIDEO_GIF_MAX_FPS 50
// Any other container: at most 1000 frames a second (video_writer_open refuses more).
#define VIDEO_MAX_FPS 1000

typedef struct VideoWriter VideoWriter;
// Encode width x height RGB24 frames at `fps` into `path`; the container comes from the extension:
// .mp4/.m4v/.mov (moov at the front), .mkv, .avi: H.264 (libx264, CRF 18, 4:2:0, or 4:4:4 when a side
// is odd) where the build has that encoder, else MPEG-4 part 2 (qscale 2); .gif: FFmpeg's gif encoder
// with a median-cut palette per frame. comment (NULL: none) goes into the container's metadata as its
// "comment" tag (what ffprobe and players show of .mp4/.m4v/.mov, .mkv and .avi; a .gif has none).
// NULL with one line in err on failure.
VideoWriter *video_writer_open(const char *path, int width, int height, double fps, const char *comment, char *err,
                               size_t errlen);
// The memory the container's index takes a frame until the file closes (MP4 and MOV keep an entry a
// frame, AVI a smaller one; Matroska indexes only keyframes, GIF nothing): bytes, as measured with
// FFmpeg 5.1 over 40000 frames (78 and 20), rounded up. 0 for a path not a video's.
int video_index_bytes_per_frame(const char *path);
// The encoder's name ("libx264", "mpeg4", "gif").
const char *video_writer_codec(const VideoWriter *w);
// Add one frame (width*height*3 bytes). 0, or -1 with one line in err; after an error every later
// call fails too.
int video_writer_add(VideoWriter *w, const uint8_t *rgb, char *err, size_t errlen);
// Flush the encoder, write the trailer, close the file and free w (always, even on failure).
// 0, or -1 with one line in err. The file is left in place either way.
int video_writer_close(VideoWriter *w, char *err, size_t errlen);

#endif
