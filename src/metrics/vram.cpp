#include "metrics/vram.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "core/subprocess.h"

namespace plumb::metrics {

Result<double> parse_memory_used(std::string_view out) {
  std::optional<double> most;
  size_t start = 0;
  while (start <= out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string_view::npos) end = out.size();
    std::string line(out.substr(start, end - start));
    start = end + 1;
    line.erase(line.find_last_not_of(" \t\r") + 1);
    line.erase(0, line.find_first_not_of(" \t"));
    if (line.empty()) continue;
    char* rest = nullptr;
    const double v = std::strtod(line.c_str(), &rest);
    if (rest == line.c_str() || *rest != '\0' || !(v >= 0))
      return invalid_argument("nvidia-smi memory.used: not a MiB figure: '" + line.substr(0, 80) + "'");
    most = std::max(most.value_or(v), v);
  }
  if (!most) return invalid_argument("nvidia-smi memory.used: no card listed");
  return *most;
}

VramSampler::VramSampler(std::chrono::milliseconds interval, std::string program)
    : interval_(interval), program_(std::move(program)) {}

VramSampler::~VramSampler() { stop(); }

namespace {

// Runs `path` with nvidia-smi's memory query, its stderr dropped (a failing driver would otherwise
// print every interval); stdout, or why not.
Result<std::string> query(const std::string& path) {
  PLUMB_ASSIGN_OR_RETURN(
      RunOutput r,
      run_capture({path, "--query-gpu=memory.used", "--format=csv,noheader,nounits"}, /*drop_stderr=*/true));
  if (!r.exit.exited || r.exit.exit_code != 0) return io_error(path + " failed (" + r.exit.to_string() + ")");
  return r.out;
}

}  // namespace

bool VramSampler::sample() {
  if (path_.empty()) path_ = find_executable(program_);
  Result<std::string> out =
      path_.empty()
          ? Result<std::string>(not_found(
                program_ + " could not be run: not found" +
                (program_.find('/') == std::string::npos ? std::string(" on PATH") : std::string())))
          : query(path_);
  Result<double> v = out.ok() ? parse_memory_used(*out) : Result<double>(out.status());
  std::lock_guard<std::mutex> lock(mu_);
  if (!v.ok()) {
    if (peak_.samples == 0) peak_.unavailable = v.status().message();
    return false;
  }
  peak_.peak_mib = std::max(peak_.peak_mib.value_or(*v), *v);
  ++peak_.samples;
  peak_.unavailable.clear();
  return true;
}

void VramSampler::start() {
  if (!sample()) return;  // no GPU memory to sample here: stop() reports why
  thread_ = std::thread([this] { loop(); });
}

void VramSampler::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    sample();
    lock.lock();
  }
}

VramPeak VramSampler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

}  // namespace plumb::metrics
