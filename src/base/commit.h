// commit.h: which source this program was built from, for --version and for what the program writes
// that a figure may later be traced back to (a checkpoint's metadata, eval's settings lines).
#pragma once

// "framechain VERSION (commit COMMIT)": the program's name, version and commit in one string. COMMIT is
// what the Makefile found: git's ("+changes" where tracked files differed from it), the one a `git
// archive` of the source was made from, or "unknown".
const char *fc_build_name(void);
