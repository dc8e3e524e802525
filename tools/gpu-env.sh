# Sourced, not run: `. tools/gpu-env.sh [DIR]` on a GPU machine that has
# nvcc, meson and ninja but no network and none of Debian's liburing,
# libnuma, cmocka or pkg-config (tools/gpu-check.sh --fetch put their .deb
# files in DIR, default .gpu-debs/).  Unpacks each DIR/*.deb, and
# DIR/mpi/*.deb where there are some (Open MPI, for bench/compare-mpi.sh),
# into GPU_CHECK_PREFIX (default /tmp/shmesh-gpu-prefix, emptied first),
# then points pkg-config (sysroot), the loader, PATH and Open MPI's
# OPAL_PREFIX at it.  Sets gpu_env_ok=1 on success, else prints why and
# sets gpu_env_ok=0.  Sourcing it again in the same shell does nothing.
gpu_env_setup() {
    local dir=${1:-.gpu-debs} prefix=${GPU_CHECK_PREFIX:-/tmp/shmesh-gpu-prefix} deb
    local debs=("$dir"/*.deb)
    if [ ! -e "${debs[0]}" ]; then
        echo "gpu-env: no .deb files in $dir: run 'tools/gpu-check.sh --fetch $dir' where apt works first" >&2
        return 1
    fi
    command -v dpkg >/dev/null || { echo "gpu-env: dpkg is needed to unpack $dir/*.deb" >&2; return 1; }
    rm -rf "$prefix"
    mkdir -p "$prefix"
    [ -e "$dir/mpi" ] && debs+=("$dir"/mpi/*.deb)
    echo "gpu-env: unpacking ${#debs[@]} packages from $dir into $prefix"
    for deb in "${debs[@]}"; do
        [ -e "$deb" ] || continue
        dpkg -x "$deb" "$prefix" || { echo "gpu-env: could not unpack $deb" >&2; return 1; }
    done
    local libdirs pcdirs
    libdirs=$(find "$prefix" -maxdepth 3 -type d -path '*/lib/*-linux-gnu' | paste -sd: -)
    [ -d "$prefix/usr/lib/x86_64-linux-gnu/openmpi/lib" ] &&
        libdirs=$libdirs:$prefix/usr/lib/x86_64-linux-gnu/openmpi/lib
    pcdirs=$(find "$prefix" -maxdepth 5 -type d -name pkgconfig | paste -sd: -)
    export PKG_CONFIG_SYSROOT_DIR=$prefix
    export PKG_CONFIG_PATH=$pcdirs
    export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$prefix/usr/bin${PATH:+:$PATH}
    [ -x "$prefix/usr/bin/orterun" ] && export OPAL_PREFIX=$prefix/usr
    echo "gpu-env: PKG_CONFIG_SYSROOT_DIR=$PKG_CONFIG_SYSROOT_DIR"
    echo "gpu-env: PKG_CONFIG_PATH=$PKG_CONFIG_PATH"
    echo "gpu-env: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "gpu-env: PATH=$PATH"
    GPU_ENV_DONE=$prefix
    export GPU_ENV_DONE
}
if [ -n "${GPU_ENV_DONE:-}" ]; then
    gpu_env_ok=1
elif gpu_env_setup "$@"; then
    gpu_env_ok=1
else
    gpu_env_ok=0
fi
