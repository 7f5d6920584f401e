#include "protocol/provenance.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

#include "core/file.h"
#include "core/json.h"
#include "core/sha256.h"
#include "core/subprocess.h"
#include "plumb_build_info.h"

namespace plumb::protocol {

BuildInfo build_info() { return {PLUMB_VERSION, PLUMB_GIT_COMMIT, PLUMB_BUILD_TYPE, PLUMB_COMPILER}; }

std::string MachineFingerprint::canonical_json() const {
  json::object o{{"cpu_model", cpu_model}, {"cores", cores},           {"memory_bytes", memory_bytes},
                 {"gpu_model", gpu_model}, {"gpu_driver", gpu_driver}, {"kernel", kernel}};
  return json::canonical(o);
}

std::string MachineFingerprint::hash() const { return sha256_hex(canonical_json()); }

namespace {

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

// Value of the first "key : value" line whose key matches, from a /proc text file.
std::string proc_field(const std::string& path, const std::string& key) {
  auto text = read_file(path);
  if (!text.ok()) return "";
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return "";
}

bool on_path(const std::string& prog) { return !find_executable(prog).empty(); }

}  // namespace

Result<MachineFingerprint> capture_machine() {
  MachineFingerprint m;
  m.cpu_model = proc_field("/proc/cpuinfo", "model name");
  if (m.cpu_model.empty()) m.cpu_model = "unknown";
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  m.cores = n > 0 ? int64_t(n) : 0;
  // "MemTotal:       131072000 kB"
  std::string mem = proc_field("/proc/meminfo", "MemTotal");
  if (!mem.empty()) m.memory_bytes = int64_t(std::stoll(mem)) * 1024;
  struct utsname u {};
  if (uname(&u) != 0) return io_error("uname failed");
  m.kernel = std::string(u.sysname) + " " + u.release + " " + u.machine;
  m.gpu_model = "none";
  m.gpu_driver = "none";
  // nvidia-smi is absent on CPU machines; any failure means "no GPU we can name".
  if (!on_path("nvidia-smi")) return m;
  auto out = run_capture({"nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"});
  if (out.ok() && out->exit.exited && out->exit.exit_code == 0 && !trim(out->out).empty()) {
    std::istringstream in(out->out);
    std::string line, names, driver;
    while (std::getline(in, line)) {
      size_t comma = line.rfind(',');
      if (comma == std::string::npos) continue;
      if (!names.empty()) names += ";";
      names += trim(line.substr(0, comma));
      driver = trim(line.substr(comma + 1));
    }
    if (!names.empty()) {
      m.gpu_model = names;
      m.gpu_driver = driver;
    }
  }
  return m;
}

}  // namespace plumb::protocol
