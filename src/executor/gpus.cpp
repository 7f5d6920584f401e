// The GPUs of one host: slots of cards for parallel jobs, the child environment, and the cards'
// identities from nvidia-smi for a job's provenance.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/subprocess.h"
#include "executor/executor.h"

namespace plumb::executor {

void set_child_gpu_env(std::map<std::string, std::string>& env) {
  for (const auto& [k, v] : kMulticastOffEnv) env[k] = v;
}

std::string GpuSlot::visible_devices() const {
  std::string s;
  for (int c : cards) s += (s.empty() ? "" : ",") + std::to_string(c);
  return s;
}

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t p = 0;
  while (true) {
    size_t c = s.find(sep, p);
    out.push_back(trim(s.substr(p, c == std::string::npos ? std::string::npos : c - p)));
    if (c == std::string::npos) return out;
    p = c + 1;
  }
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() < 7 &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

}  // namespace

Result<std::vector<GpuSlot>> gpu_slots(const std::string& gpus, int per_trial) {
  if (per_trial < 1)
    return invalid_argument("--gpus-per-trial must be >= 1 (cards each trial's engine gets)");
  if (trim(gpus).empty())
    return invalid_argument("--gpus is empty: list the cards to use by index, e.g. --gpus 0,1,2,3");
  std::vector<int> cards;
  std::set<int> seen;
  for (const std::string& item : split(gpus, ',')) {
    if (!all_digits(item))
      return invalid_argument(
          "--gpus: '" + item +
          "' is not a card index; list cards as non-negative integers, e.g. --gpus 0,1,2,3");
    int c = std::stoi(item);
    if (!seen.insert(c).second)
      return invalid_argument("--gpus lists card " + item + " twice; each card belongs to one slot");
    cards.push_back(c);
  }
  if (cards.size() % size_t(per_trial) != 0)
    return invalid_argument("--gpus-per-trial " + std::to_string(per_trial) + " does not divide the " +
                            std::to_string(cards.size()) + " cards of --gpus " + gpus +
                            ": list a multiple of it, or choose a divisor");
  std::vector<GpuSlot> slots;
  for (size_t i = 0; i < cards.size(); i += size_t(per_trial)) {
    GpuSlot s;
    s.index = int(slots.size());
    s.cards.assign(cards.begin() + long(i), cards.begin() + long(i) + per_trial);
    slots.push_back(std::move(s));
  }
  return slots;
}

size_t GpuSlotPool::free_count() const {
  return size_t(
      std::count_if(holder_.begin(), holder_.end(), [](const std::string& h) { return h.empty(); }));
}

Result<std::optional<GpuSlot>> GpuSlotPool::acquire(const std::string& job) {
  if (job.empty()) return invalid_argument("a GPU slot needs a job name");
  if (std::find(holder_.begin(), holder_.end(), job) != holder_.end())
    return invalid_argument("job " + job + " already holds a GPU slot");
  for (size_t i = 0; i < slots_.size(); ++i)
    if (holder_[i].empty()) {
      holder_[i] = job;
      return std::optional<GpuSlot>(slots_[i]);
    }
  return std::optional<GpuSlot>();
}

std::optional<GpuSlot> GpuSlotPool::release(const std::string& job) {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!job.empty() && holder_[i] == job) {
      holder_[i].clear();
      return slots_[i];
    }
  return std::nullopt;
}

std::vector<std::string> nvidia_smi_query_argv() {
  return {"--query-gpu=index,name,uuid,clocks.max.sm,driver_version", "--format=csv,noheader"};
}

Result<std::vector<GpuIdentity>> parse_nvidia_smi(const std::string& text) {
  std::vector<GpuIdentity> out;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (trim(line).empty()) continue;
    auto f = split(line, ',');
    if (f.size() != 5)
      return invalid_argument(
          "nvidia-smi output line " + std::to_string(n) + " has " + std::to_string(f.size()) +
          " fields, not 5 (index, name, uuid, clocks.max.sm, driver_version): '" + line + "'");
    if (!all_digits(f[0]))
      return invalid_argument("nvidia-smi output line " + std::to_string(n) + ": index '" + f[0] +
                              "' is not a number");
    out.push_back(GpuIdentity{std::stoi(f[0]), f[1], f[2], f[3], f[4]});
  }
  return out;
}

json::object DeviceProvenance::to_json() const {
  json::array cards;
  for (const auto& g : gpus)
    cards.push_back(json::object{{"index", int64_t(g.index)},
                                 {"name", g.name},
                                 {"uuid", g.uuid},
                                 {"max_sm_clock", g.max_sm_clock},
                                 {"driver", g.driver}});
  return json::object{{"host", host},
                      {"cuda_visible_devices", cuda_visible_devices},
                      {"gpus", std::move(cards)},
                      {"gpu_identity", unavailable.empty() ? std::string("ok") : unavailable},
                      {"nccl_nvls_enable", nccl_nvls_enable}};
}

std::string DeviceProvenance::summary() const {
  std::string s =
      "host " + host + ", cards " + (cuda_visible_devices.empty() ? "(all)" : cuda_visible_devices);
  if (!unavailable.empty()) return s + " (" + unavailable + ")";
  std::string ids;
  for (const auto& g : gpus) ids += (ids.empty() ? "" : "; ") + g.name + " " + g.uuid;
  return s + " (" + (ids.empty() ? std::string("no card listed by nvidia-smi") : ids) + ")";
}

DeviceProvenance device_provenance_from(const std::string& host, const std::string& visible,
                                        const Result<std::string>& smi_output) {
  DeviceProvenance d;
  d.host = host;
  d.cuda_visible_devices = visible;
  if (!smi_output.ok()) {
    d.unavailable = "gpu identity unavailable: " + smi_output.status().message();
    return d;
  }
  auto cards = parse_nvidia_smi(*smi_output);
  if (!cards.ok()) {
    d.unavailable = "gpu identity unavailable: " + cards.status().message();
    return d;
  }
  std::vector<std::string> want = visible.empty() ? std::vector<std::string>() : split(visible, ',');
  for (const auto& g : *cards) {
    bool keep = want.empty() || std::any_of(want.begin(), want.end(), [&](const std::string& w) {
                  return w == std::to_string(g.index) || w == g.uuid;
                });
    if (keep) d.gpus.push_back(g);
  }
  return d;
}

namespace {

Result<std::string> run_nvidia_smi(const std::string& exe) {
  if (find_executable(exe).empty()) return not_found(exe + " not found");
  std::vector<std::string> argv{exe};
  for (auto& a : nvidia_smi_query_argv()) argv.push_back(a);
  PLUMB_ASSIGN_OR_RETURN(RunOutput r, run_capture(argv));
  if (!r.exit.exited || r.exit.exit_code != 0)
    return unavailable(exe + " failed (" + r.exit.to_string() + "): " + trim(r.out).substr(0, 300));
  return r.out;
}

}  // namespace

DeviceProvenance device_provenance(const std::string& nvidia_smi) {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
  DeviceProvenance d = device_provenance_from(host, vis ? vis : "", run_nvidia_smi(nvidia_smi));
  const char* nvls = std::getenv(kNcclNvlsEnable);
  d.nccl_nvls_enable = nvls ? nvls : "";
  return d;
}

}  // namespace plumb::executor
