# Sourced by tools/gpu_check.sh and tools/compare_builds.sh: headers or libraries the machine lacks
# (OpenBLAS's cblas.h, zlib.h) can come along in build/gpulibs (include/, lib/); point the compiler
# and the loader at them where the system has none.
if [ -d build/gpulibs ]; then
    [ -e build/gpulibs/lib/libopenblas.so ] || ln -sf libopenblas.so.0 build/gpulibs/lib/libopenblas.so
    for h in cblas.h zlib.h; do
        if ! echo "#include <$h>" | cc -E - > /dev/null 2>&1; then
            echo "using build/gpulibs for $h"
            export C_INCLUDE_PATH=$PWD/build/gpulibs/include LIBRARY_PATH=$PWD/build/gpulibs/lib
            export LD_LIBRARY_PATH=$PWD/build/gpulibs/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        fi
    done
fi
