// Search spaces for `plumb tune`: which engine parameters to vary, over what values, under what
// conditions. A space is a TOML file (format in docs/tuning.md); one ships for each built-in
// adapter (src/tune/spaces/<adapter>.toml, compiled into the binary).
//
//   name = "plumb"
//   adapter = "plumb"                  # the engine adapter trials launch (built-in name or path)
//   [fixed]                            # parameters every trial passes unchanged
//   engine = "llm"
//   [[param]]
//   name = "max_num_seqs"              # a parameter the adapter knows
//   type = "int"                       # int | float | categorical | bool
//   low = 1                            # int/float: a range ...
//   high = 64
//   log = true                         #   sampled log-uniformly (both bounds > 0)
//   grid = [1, 4, 16, 64]              #   the grid strategy's points (else grid_points, default 3)
//   [[param]]
//   name = "prefill_chunk_size"
//   type = "int"
//   values = [64, 128, 256]            # ... or an explicit value list (ordinal for int/float)
//   when = { enable_chunked_prefill = true }   # active only then; the condition names an earlier
//                                              # parameter; a value or an array of allowed values
//
// A configuration (Config) holds exactly the active parameters; inactive ones are absent (the
// engine uses its own default for them).
//
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "core/random.h"
#include "core/status.h"
#include "launch/adapter.h"

namespace plumb::tune {

using Config = launch::Params;

enum class ParamKind { kInt, kFloat, kCategorical, kBool };
std::string_view kind_name(ParamKind k);  // "int" | "float" | "categorical" | "bool"

// Active when the earlier parameter `param` is active and its value is one of `values`.
struct Condition {
  std::string param;
  std::vector<launch::ParamValue> values;
};

struct ParamSpec {
  std::string name;                                 // the adapter's parameter name
  ParamKind kind = ParamKind::kInt;                 // what values it takes
  double low = 0, high = 0;                         // int/float ranges (inclusive); unused with `values`
  bool log = false;                                 // ranges: sample log-uniformly (low > 0)
  int grid_points = 3;                              // ranges: grid points when `grid` is empty (>= 2)
  std::vector<launch::ParamValue> grid;             // ranges: explicit grid points (within [low, high])
  std::vector<launch::ParamValue> values;           // categorical, bool ({false,true}), or int/float lists
  std::optional<launch::ParamValue> default_value;  // informative (the engine's default)
  std::vector<Condition> when;                      // all must hold for the parameter to be active
  bool is_range() const { return (kind == ParamKind::kInt || kind == ParamKind::kFloat) && values.empty(); }
};

struct SearchSpace {
  std::string name;               // e.g. "plumb"
  std::string adapter;            // adapter trials use (built-in name or path)
  launch::Params fixed;           // passed to every trial
  std::vector<ParamSpec> params;  // in declaration order (conditions refer to earlier ones)
  std::string description;        // free text
};

// Parses a space. InvalidArgument naming the parameter and field for: a missing name/type, an
// unknown type, low > high, log with low <= 0, a grid point outside the range, an empty value
// list, a value of the wrong type, a duplicate name, a condition on an unknown or later
// parameter, a fixed parameter that is also searched.
Result<SearchSpace> parse_space(std::string_view toml_text, std::string_view source_name = "space");
Result<SearchSpace> load_space_file(const std::string& path);  // NotFound if missing
// The shipped spaces, one per built-in adapter: "plumb", "vllm", "sglang", "llamacpp".
Result<SearchSpace> builtin_space(std::string_view name);
Result<std::string> builtin_space_text(std::string_view name);
std::vector<std::string> builtin_space_names();
// A built-in name, else a file path.
Result<SearchSpace> resolve_space(const std::string& name_or_path);

// Whether `p` is active given the values already chosen in `c` (earlier parameters).
bool is_active(const ParamSpec& p, const Config& c);
// InvalidArgument naming the parameter if `c` lacks an active parameter, holds an inactive or
// unknown one, or a value outside its domain (type, range, list).
Status validate_config(const SearchSpace& space, const Config& c);

// The grid points of one parameter: `values`, or `grid`, or grid_points evenly spaced over the
// range (geometrically when log; ints rounded and deduplicated), in increasing order.
std::vector<launch::ParamValue> grid_values(const ParamSpec& p);
// Every configuration of the grid, the first declared parameter varying slowest (nested loops in
// declaration order); an inactive parameter contributes no factor. FailedPrecondition when the
// grid has more than `limit` points.
Result<std::vector<Config>> enumerate_grid(const SearchSpace& space, size_t limit = 100000);
// Whether every parameter has a finite domain (values/bool/categorical), so the whole space is
// the grid and strategies can avoid measuring a configuration twice.
bool is_finite(const SearchSpace& space);

// One configuration drawn uniformly: ranges uniform (log-uniform with log; ints rounded), lists
// and categories uniformly, inactive parameters skipped.
Config sample_uniform(const SearchSpace& space, Rng& rng);

// Canonical JSON of a configuration (sorted keys): its identity for duplicate checks.
std::string config_key(const Config& c);
json::object config_to_json(const Config& c);
json::value param_to_json(const launch::ParamValue& v);
// Reads a configuration back, converting JSON numbers to the parameter's kind (an integral double
// is accepted for an int parameter); then validates it against the space.
Result<Config> config_from_json(const SearchSpace& space, const json::object& o);
// The space as JSON (for the external proposer's context and the report).
json::object space_to_json(const SearchSpace& space);
// Human-readable "k=v k=v" in declaration order.
std::string config_summary(const SearchSpace& space, const Config& c);

}  // namespace plumb::tune
