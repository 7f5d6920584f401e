// The process-wide switch of programmatic dependent launch (ops.h, pdl.cuh).
#include <atomic>

#include "engine/cuda/ops.h"

namespace plumb::cuda {
namespace {

std::atomic<bool> g_pdl{true};

}  // namespace

void set_pdl_enabled(bool on) { g_pdl.store(on, std::memory_order_relaxed); }

bool pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }

}  // namespace plumb::cuda
