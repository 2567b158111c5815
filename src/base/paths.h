// paths.h: folders on disk.
#ifndef FRAMECHAIN_PATHS_H
#define FRAMECHAIN_PATHS_H

#include <stddef.h>

// mkdir -p: create the folder and any missing parents. 0, or -1 with one line in err naming the part
// that could not be made, or the path when it exists but is not a folder.
int fc_mkdir_p(const char *dir, char *err, size_t errlen);

#endif
