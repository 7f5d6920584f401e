// Placement: which CPUs a launched engine and plumb's own load-generating client run on, so that on a
// machine with few cores the two stop disturbing each other (the client's timing threads and the
// engine's compute threads otherwise share cores and each other's scheduling noise).
//
//   auto p = launch::plan_placement(launch::available_cpus(), launch::PlacementMode::kAuto);
//   // p.engine_cpus: the engine's process (and every thread it starts) is bound to these;
//   // p.client_cpus: the measuring thread (and the client threads it starts) to these.
//
// The plan (kAuto): with n >= 2 CPUs available to plumb, the client gets max(1, n / 8) of them (the
// lowest-numbered) and the engine the rest; with one CPU there is nothing to separate and nothing is
// pinned (`note` says so). kOff pins nothing. The engine's compute thread count is sized to its CPUs
// by the caller that renders the engine's command (compare/measure.h), since only it knows the
// adapter's thread parameter.
//
// Binding uses sched_setaffinity on the calling thread around the fork (ScopedAffinity): a child
// inherits its parent thread's mask at fork, so every thread the engine ever starts is bound, with no
// window in which an early thread could escape.
//
// Thread-safety: plan_placement and cpu_list are pure; ScopedAffinity changes only the calling
// thread's mask and restores it on destruction.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace plumb::launch {

enum class PlacementMode { kAuto, kOff };
// "auto" | "off"; InvalidArgument otherwise.
Result<PlacementMode> parse_placement_mode(std::string_view s);
std::string_view placement_mode_name(PlacementMode m);

struct Placement {
  PlacementMode mode = PlacementMode::kOff;
  std::vector<int> available;    // CPUs plumb may use (its affinity mask at planning time)
  std::vector<int> engine_cpus;  // empty: the engine is not pinned
  std::vector<int> client_cpus;  // empty: the client is not pinned
  std::string note;              // why nothing is pinned, when it is not; "" otherwise
  bool pinned() const { return !engine_cpus.empty(); }
  // {"mode", "available", "engine_cpus", "client_cpus", "note"} (CPU lists as cpu_list text).
  json::object to_json() const;
  // One line for reports: "engine on CPUs 1 (1), client on CPU 0" or "not pinned: <note>".
  std::string describe() const;
};

// The CPUs the calling thread may run on (sched_getaffinity), ascending; all online CPUs if the
// mask cannot be read.
std::vector<int> available_cpus();

// The plan for `available` (see the header comment); `available` is taken as given (sorted here).
Placement plan_placement(std::vector<int> available, PlacementMode mode);

// "0-3,5,7-8" for {0,1,2,3,5,7,8}; "" for none.
std::string cpu_list(const std::vector<int>& cpus);

// Binds the calling thread to `cpus` for its lifetime and restores the previous mask afterwards.
// An empty list binds nothing. ok() is false (and nothing changed) if the kernel refused the mask.
class ScopedAffinity {
 public:
  explicit ScopedAffinity(const std::vector<int>& cpus);
  ~ScopedAffinity();
  ScopedAffinity(const ScopedAffinity&) = delete;
  ScopedAffinity& operator=(const ScopedAffinity&) = delete;
  const Status& status() const { return status_; }

 private:
  std::optional<std::vector<int>> previous_;
  Status status_;
};

}  // namespace plumb::launch
