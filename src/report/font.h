// font.h: the bitmap font plots are written in: printable ASCII, 5 x 9 pixels a glyph (rows 0-6 the
// capitals and digits, 2-6 the lower case, 7-8 the descenders), 6 pixels from one glyph to the next.
#ifndef FRAMECHAIN_REPORT_FONT_H
#define FRAMECHAIN_REPORT_FONT_H

#include <stdint.h>

#define FONT_W 5        // glyph width in pixels
#define FONT_H 9        // glyph height, descenders included
#define FONT_CAP 7      // height of a capital or a digit
#define FONT_ADVANCE 6  // from one glyph to the next

// The rows of a character's glyph, top first; bit 4 of a row is its leftmost pixel. A byte outside
// printable ASCII (a control character) gets '?'; the drawing (plot.c) draws a whole UTF-8 sequence as
// one '?'.
const uint8_t *font_glyph(unsigned char c);

#endif
