// commit.c: the source's commit, which the Makefile passes as FC_COMMIT (see commit.h).
#include "base/commit.h"

#include "base/common.h"

#ifndef FC_COMMIT
#define FC_COMMIT "unknown"  // a build without the Makefile's line (the fuzzers')
#endif

const char *fc_build_name(void) { return "framechain " FC_VERSION " (commit " FC_COMMIT ")"; }
