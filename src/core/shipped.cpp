#include "core/shipped.h"

#include <cstdlib>
#include <filesystem>

namespace plumb {
namespace {

namespace fs = std::filesystem;

const char* folder(Shipped k) { return k == Shipped::kModels ? "models" : "data"; }
const char* variable(Shipped k) { return k == Shipped::kModels ? "PLUMB_MODELS_DIR" : "PLUMB_DATA_DIR"; }

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::string tried_list(const std::vector<std::string>& paths) {
  std::string s;
  for (const auto& p : paths) s += (s.empty() ? "" : ", ") + p;
  return s;
}

}  // namespace

std::vector<std::string> shipped_candidates(Shipped kind) {
  std::vector<std::string> dirs;
  if (std::string v = env(variable(kind)); !v.empty()) dirs.push_back(v);
  if (kind == Shipped::kData)
    if (std::string m = env("PLUMB_MODELS_DIR"); !m.empty())
      dirs.push_back((fs::path(m).parent_path() / "data").string());
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path up = exe.parent_path();
    for (int level = 0; level < 6 && !up.empty(); ++level, up = up.parent_path()) {
      if (fs::is_directory(up / "models" / "configs", ec)) {
        dirs.push_back((up / folder(kind)).string());
        break;
      }
      if (up == up.root_path()) break;
    }
    dirs.push_back((exe.parent_path().parent_path() / "share" / "plumb" / folder(kind)).string());
  }
  dirs.emplace_back(folder(kind));
  return dirs;
}

Result<std::string> find_shipped_dir(Shipped kind) {
  auto dirs = shipped_candidates(kind);
  for (const auto& d : dirs) {
    std::error_code ec;
    if (fs::is_directory(d, ec)) return fs::weakly_canonical(d, ec).string();
  }
  return not_found(std::string("no shipped ") + folder(kind) + " folder found (looked in " +
                   tried_list(dirs) + "); set " + variable(kind) + " to it");
}

Result<std::string> find_shipped_file(Shipped kind, const std::string& relative) {
  std::vector<std::string> tried;
  for (const auto& d : shipped_candidates(kind)) {
    std::string p = d + "/" + relative;
    std::error_code ec;
    if (fs::exists(p, ec)) return fs::weakly_canonical(p, ec).string();
    tried.push_back(p);
  }
  return not_found("shipped file " + std::string(folder(kind)) + "/" + relative + " not found (looked in " +
                   tried_list(tried) + "); set " + variable(kind) + " to the folder that holds it");
}

}  // namespace plumb
