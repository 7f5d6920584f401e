// What every fuzz target shares: the entry-point macro and a reader that splits one input into
// fields.
//
// A target is a check: it feeds one input to a parser and returns "" when every invariant held, or
// a sentence saying which one broke. Under libFuzzer (the `fuzz` preset) the macro also defines
// LLVMFuzzerTestOneInput, which aborts on a broken invariant so the input is saved as a crash. In
// the GoogleTest build (PLUMB_FUZZ_REPLAY, tests/fuzz/) the macro registers the check instead, and
// fuzz_replay_test feeds it the seed corpus and every saved crash input (docs/fuzzing.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace plumb::fuzz {

using Check = std::string (*)(std::string_view input);

struct Target {
  const char* name;  // the target's name: fuzz/fuzz_<name>.cpp, fuzz/corpus/<name>/
  Check check;
};

// Every target linked into this program (replay builds only).
inline std::vector<Target>& registry() {
  static std::vector<Target> targets;
  return targets;
}

struct Registrar {
  Registrar(const char* name, Check check) { registry().push_back({name, check}); }
};

// Reads an input front to back: single bytes (0 past the end) and fields cut at a separator byte.
// Targets that need structure (a mode byte, several strings) use it so that any byte string is a
// valid input and mutations stay meaningful.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  uint8_t byte() {
    if (pos_ >= data_.size()) return 0;
    return static_cast<uint8_t>(data_[pos_++]);
  }
  // Up to the next `sep` (consumed, not returned), or the rest.
  std::string_view field(char sep) {
    std::string_view rest = data_.substr(pos_);
    std::size_t n = rest.find(sep);
    if (n == std::string_view::npos) {
      pos_ = data_.size();
      return rest;
    }
    pos_ += n + 1;
    return rest.substr(0, n);
  }
  std::string_view rest() {
    std::string_view r = data_.substr(pos_);
    pos_ = data_.size();
    return r;
  }
  bool done() const { return pos_ >= data_.size(); }

 private:
  std::string_view data_;
  std::size_t pos_ = 0;
};

}  // namespace plumb::fuzz

#define PLUMB_FUZZ_CAT_INNER(a, b) a##b
#define PLUMB_FUZZ_CAT(a, b) PLUMB_FUZZ_CAT_INNER(a, b)

// PLUMB_FUZZ_TARGET(name) { ... return ""; } defines the check of target `name`; `input` is the
// input. Exactly one per fuzz_<name>.cpp.
#ifdef PLUMB_FUZZ_REPLAY
#define PLUMB_FUZZ_TARGET(name)                                                       \
  static std::string PLUMB_FUZZ_CAT(plumb_fuzz_check_, name)(std::string_view input); \
  static const ::plumb::fuzz::Registrar PLUMB_FUZZ_CAT(plumb_fuzz_registrar_, name)(  \
      #name, &PLUMB_FUZZ_CAT(plumb_fuzz_check_, name));                               \
  static std::string PLUMB_FUZZ_CAT(plumb_fuzz_check_, name)(std::string_view input)
#else
#define PLUMB_FUZZ_TARGET(name)                                                                             \
  static std::string PLUMB_FUZZ_CAT(plumb_fuzz_check_, name)(std::string_view input);                       \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {                            \
    std::string broken = PLUMB_FUZZ_CAT(plumb_fuzz_check_,                                                  \
                                        name)(std::string_view(reinterpret_cast<const char*>(data), size)); \
    if (!broken.empty()) {                                                                                  \
      std::fprintf(stderr, "fuzz_%s: invariant broken: %s\n", #name, broken.c_str());                       \
      std::abort();                                                                                         \
    }                                                                                                       \
    return 0;                                                                                               \
  }                                                                                                         \
  static std::string PLUMB_FUZZ_CAT(plumb_fuzz_check_, name)(std::string_view input)
#endif
