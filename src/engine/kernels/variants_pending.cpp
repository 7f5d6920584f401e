// Fast variants are registered by their own files as they land; until then these register nothing.
#include "engine/kernels/reference.h"

namespace plumb::engine::detail {
void register_avx2_kernels(KernelRegistry&) {}
void register_onednn_kernels(KernelRegistry&) {}
}  // namespace plumb::engine::detail
