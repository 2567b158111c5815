// sample_opts.h: the sampling options generate and eval share (--steps, --seed, --guidance,
// --temperature and the drift guards), parsed once for both. Each command declares them in its own
// option table; --noise-aug is each command's own (generate takes one level, eval a list).
#ifndef FRAMECHAIN_SAMPLE_OPTS_H
#define FRAMECHAIN_SAMPLE_OPTS_H

#include "chain/sampler.h"
#include "cli.h"

// The defaults (sampler.h), overridden by whichever of the shared options opts holds; a value out of
// range is a usage error (status 2) naming its option.
SampleOptions parse_sample_options(Opt *opts);

#endif
