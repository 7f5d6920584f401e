#include "engine/cpu/observer.h"

#include <atomic>

namespace plumb::engine {

namespace {
std::atomic<KernelObserver*> g_observer{nullptr};
}

KernelObserver* set_kernel_observer(KernelObserver* obs) { return g_observer.exchange(obs); }
KernelObserver* kernel_observer() { return g_observer.load(std::memory_order_acquire); }

}  // namespace plumb::engine
