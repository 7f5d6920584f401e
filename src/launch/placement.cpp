#include "launch/placement.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace plumb::launch {
namespace {

std::optional<std::vector<int>> current_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return std::nullopt;
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

Status set_mask(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0)
    return io_error("sched_setaffinity(" + cpu_list(cpus) + "): " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace

Result<PlacementMode> parse_placement_mode(std::string_view s) {
  if (s == "auto") return PlacementMode::kAuto;
  if (s == "off") return PlacementMode::kOff;
  return invalid_argument("placement must be 'auto' or 'off', not '" + std::string(s) + "'");
}

std::string_view placement_mode_name(PlacementMode m) { return m == PlacementMode::kAuto ? "auto" : "off"; }

json::object Placement::to_json() const {
  return json::object{{"mode", std::string(placement_mode_name(mode))},
                      {"available", cpu_list(available)},
                      {"engine_cpus", cpu_list(engine_cpus)},
                      {"client_cpus", cpu_list(client_cpus)},
                      {"note", note}};
}

std::string Placement::describe() const {
  if (!pinned()) return "not pinned: " + note;
  auto cpus = [](const std::vector<int>& v) {
    return std::string(v.size() == 1 ? "CPU " : "CPUs ") + cpu_list(v);
  };
  return "engine on " + cpus(engine_cpus) + ", client on " + cpus(client_cpus);
}

std::vector<int> available_cpus() {
  if (auto m = current_mask(); m && !m->empty()) return *m;
  std::vector<int> all(std::max(1u, std::thread::hardware_concurrency()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = int(i);
  return all;
}

Placement plan_placement(std::vector<int> available, PlacementMode mode) {
  std::sort(available.begin(), available.end());
  available.erase(std::unique(available.begin(), available.end()), available.end());
  Placement p;
  p.mode = mode;
  p.available = available;
  if (mode == PlacementMode::kOff) {
    p.note = "placement off";
    return p;
  }
  const size_t n = available.size();
  if (n < 2) {
    p.note = "one CPU available: the engine and the client share it";
    return p;
  }
  const size_t client = std::max<size_t>(1, n / 8);
  p.client_cpus.assign(available.begin(), available.begin() + long(client));
  p.engine_cpus.assign(available.begin() + long(client), available.end());
  return p;
}

std::string cpu_list(const std::vector<int>& cpus_in) {
  std::vector<int> cpus = cpus_in;
  std::sort(cpus.begin(), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

ScopedAffinity::ScopedAffinity(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  auto prev = current_mask();
  if (!prev) {
    status_ = io_error(std::string("sched_getaffinity: ") + std::strerror(errno));
    return;
  }
  status_ = set_mask(cpus);
  if (status_.ok()) previous_ = std::move(prev);
}

ScopedAffinity::~ScopedAffinity() {
  if (previous_) (void)set_mask(*previous_);
}

}  // namespace plumb::launch
