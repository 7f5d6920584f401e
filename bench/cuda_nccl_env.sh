# shellcheck shell=bash
# Sourced by the device scripts after they unpack the CUDA bundle (bench/cuda_bundle.sh). The bundle
# carries Debian 12's glibc and leaves NCCL to the device host (libnccl is 218 MB), but the host's
# system libnccl.so.2 may need a newer glibc than the bundle's loader ("GLIBC_2.38 not found"), which
# stops every binary linked with NCCL from starting. The pip wheel's libnccl (nvidia-nccl, built for
# manylinux) runs on it: put the first one found in a site-packages folder first on LD_LIBRARY_PATH
# (it wins over the bundle's run path). PLUMB_NCCL_DIR names the folder instead.
_plumb_nccl_dir=${PLUMB_NCCL_DIR:-}
if [ -z "$_plumb_nccl_dir" ]; then
  for _d in $(python3 -c "import site; print(' '.join(site.getsitepackages() + [site.getusersitepackages()]))" 2>/dev/null) \
    /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages; do
    if [ -e "$_d/nvidia/nccl/lib/libnccl.so.2" ]; then _plumb_nccl_dir=$_d/nvidia/nccl/lib; break; fi
  done
fi
if [ -n "$_plumb_nccl_dir" ]; then
  export LD_LIBRARY_PATH=$_plumb_nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "NCCL from $_plumb_nccl_dir" >&2
fi
unset _plumb_nccl_dir _d
