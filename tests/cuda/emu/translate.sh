#!/bin/sh
# translate.sh FILE.cu: the CUDA source as the emulation compiles it (tests/cuda/emu/cuda_emu.h), on
# stdout. Each launch `k<<<grid, block, smem>>>(args)` becomes `fc_emu_launch(k, "k", grid, block,
# smem)(args)`, `extern __shared__` memory a pointer to the block's dynamic shared memory, and each
# static `__shared__` declaration is followed on its line by fc_emu_shared for each name it declares
# (so that every block finds them undefined). The line numbers stay those of FILE.cu.
set -e
echo "#line 1 \"$1\""
sed -E -e 's/([A-Za-z_][A-Za-z0-9_]*(<[^<>]*>)?)<<<(.*)>>>\(/fc_emu_launch(\1, "\1", \3)(/' \
    -e 's/extern __shared__ __align__\(16\) unsigned char ([A-Za-z_]+)\[\];/unsigned char *\1 = fc_emu_dynamic_smem();/' \
    "$1" |
    perl -pe 's{^(\s*__shared__ )(.*);\s*$}{
        my ($decl, $names) = ("$1$2;", $2);
        $names =~ s/\[[^\]]*\]//g;  # the dimensions; each declarator is then "type name" or "name"
        $decl . join("", map { / (\w+)\s*$/ ? " fc_emu_shared(&$1, sizeof $1);" : "" } split(/,/, " $names")) . "\n"
    }ex'
