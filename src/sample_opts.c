// sample_opts.c: the sampling options generate and eval share (sample_opts.h).
#include "sample_opts.h"

#include "chain/drift_guard.h"

SampleOptions parse_sample_options(Opt *opts) {
    SampleOptions so = {.steps = 0, .seed = 1, .noise_aug = SAMPLE_DEFAULT_NOISE_AUG,
                        .guidance = SAMPLE_DEFAULT_GUIDANCE, .temperature = SAMPLE_MODEL_TEMPERATURE,
                        .sharpness_guard = SAMPLE_GUARD_DEFAULT, .colour_guard = SAMPLE_GUARD_DEFAULT,
                        .colour_ramp = SAMPLE_DEFAULT_COLOUR_RAMP};
    const Opt *o;
    if ((o = opt(opts, "--steps"))->count) so.steps = (int)parse_positive("--steps", o->value, 100000);
    if ((o = opt(opts, "--seed"))->count) so.seed = (uint64_t)parse_whole("--seed", o->value, 0, 9000000000000000L);
    if ((o = opt(opts, "--guidance"))->count) so.guidance = parse_number("--guidance", o->value, 0, 100);
    if ((o = opt(opts, "--temperature"))->count) so.temperature = parse_number("--temperature", o->value, 0, 10);
    if ((o = opt(opts, "--sharpness-guard"))->count)
        so.sharpness_guard = parse_number("--sharpness-guard", o->value, 0, DRIFT_GUARD_MAX);
    if ((o = opt(opts, "--colour-guard"))->count)
        so.colour_guard = parse_number("--colour-guard", o->value, 0, DRIFT_GUARD_MAX);
    if ((o = opt(opts, "--colour-ramp"))->count)
        so.colour_ramp = (int)parse_whole("--colour-ramp", o->value, 0, 1000000);
    return so;
}
