// frame_folder.h: a folder's entries in order, and a folder of PNG or JPEG frames read as one clip:
// prepare's frame folders, and the frames autoencode --input and generate --first-frame take. A
// folder of frames holds PNG or JPEG images and no video file; its images are its frames, in natural
// order of their names (f2.png before f10.png), every one the size of the first.
#ifndef FRAMECHAIN_FRAME_FOLDER_H
#define FRAMECHAIN_FRAME_FOLDER_H

#include <stddef.h>
#include <stdint.h>

// The entries of a folder as full paths (NULL-terminated; free with folder_entries_free), hidden ones
// left out, sorted by name: in natural order (natural 1: the numbers in names compared as numbers), or
// in plain byte order. NULL with errno set when the folder cannot be read.
char **folder_entries(const char *dir, int *count, int natural);
void folder_entries_free(char **list);

// Whether the file name's extension (after its last dot, not a leading one) is one of ext (NULL-ended),
// in any case.
int has_extension(const char *path, const char *const *ext);

// Video files by their extension: a folder holding one is a folder of videos, whatever images lie
// beside them (a cover.jpg, a thumbnail).
int is_video_file(const char *path);

typedef struct FrameFolder FrameFolder;

// The folder's frames, nothing decoded yet. NULL with one line in err naming the folder: it cannot be
// read, holds a video file, or holds no PNG or JPEG.
FrameFolder *frame_folder_open(const char *dir, char *err, size_t errlen);
// How many images it holds (frames, unless one stops the reading).
int frame_folder_images(const FrameFolder *f);
// How many times the numbers in its frames' names skip (f4.png then f7.png: frames missing, which
// the clip joins as if they followed each other), the first as "f4.png then f7.png" in first.
int frame_folder_gaps(const FrameFolder *f, char *first, size_t len);
// The next frame as size x size RGB24, cropped and resampled as image_load_square does: 1 with a
// frame, 0 after the last, -1 where the reading stops, with one line in err naming the frame's file:
// "stopped at a bad frame: ..." or "stopped at a frame of another size: F is WxH, unlike the WxH of
// FIRST, the first in name order" (a stray thumbnail, a frame of another export: its framing would
// jump). The reading stays stopped: every later call gives the same line.
int frame_folder_next(FrameFolder *f, int size, uint8_t *rgb, char *err, size_t errlen);
// Whether the reading stopped at a frame of another size (no damage: the frames before it are whole).
int frame_folder_stopped_at_other_size(const FrameFolder *f);
// The first frame's size as shown (its EXIF orientation applied), 0 x 0 before it is read.
void frame_folder_size(const FrameFolder *f, int *w, int *h);
void frame_folder_close(FrameFolder *f);

#endif
