// Search spaces: parsing, errors, conditions, grid enumeration order, sampling bounds, and the
// shipped spaces against their adapters.
#include "tune/space.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "launch/adapter.h"
#include "tune/study.h"

namespace plumb::tune {
namespace {

using launch::ParamValue;

const char* kSpace = R"(
name = "t"
adapter = "plumb"
[fixed]
engine = "synthetic"
[[param]]
name = "max_num_seqs"
type = "int"
values = [1, 4]
[[param]]
name = "enable_chunked_prefill"
type = "bool"
[[param]]
name = "prefill_chunk_size"
type = "int"
low = 32
high = 512
log = true
grid = [64, 256]
when = { enable_chunked_prefill = true }
)";

TEST(Space, ParsesAndEnumeratesTheGridInDeclarationOrder) {
  auto sp = parse_space(kSpace);
  ASSERT_TRUE(sp.ok()) << sp.status().to_string();
  EXPECT_EQ(sp->params.size(), 3u);
  EXPECT_EQ(std::get<std::string>(sp->fixed.at("engine")), "synthetic");
  auto g = enumerate_grid(*sp);
  ASSERT_TRUE(g.ok());
  // max_num_seqs slowest; chunked prefill false contributes no prefill_chunk_size factor.
  std::vector<std::string> keys;
  for (const auto& c : *g) keys.push_back(config_key(c));
  std::vector<std::string> want = {
      R"({"enable_chunked_prefill":false,"max_num_seqs":1})",
      R"({"enable_chunked_prefill":true,"max_num_seqs":1,"prefill_chunk_size":64})",
      R"({"enable_chunked_prefill":true,"max_num_seqs":1,"prefill_chunk_size":256})",
      R"({"enable_chunked_prefill":false,"max_num_seqs":4})",
      R"({"enable_chunked_prefill":true,"max_num_seqs":4,"prefill_chunk_size":64})",
      R"({"enable_chunked_prefill":true,"max_num_seqs":4,"prefill_chunk_size":256})",
  };
  EXPECT_EQ(keys, want);
  for (const auto& c : *g) EXPECT_TRUE(validate_config(*sp, c).ok()) << config_key(c);
  EXPECT_FALSE(is_finite(*sp));
}

TEST(Space, GridPointsOfARangeAreEvenlySpacedOrGeometric) {
  ParamSpec p;
  p.kind = ParamKind::kInt;
  p.low = 1;
  p.high = 64;
  p.log = true;
  p.grid_points = 4;
  auto v = grid_values(p);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(std::get<int64_t>(v[0]), 1);
  EXPECT_EQ(std::get<int64_t>(v[1]), 4);
  EXPECT_EQ(std::get<int64_t>(v[2]), 16);
  EXPECT_EQ(std::get<int64_t>(v[3]), 64);
  p.log = false;
  p.kind = ParamKind::kFloat;
  p.low = 0;
  p.high = 1;
  p.grid_points = 3;
  v = grid_values(p);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_DOUBLE_EQ(std::get<double>(v[1]), 0.5);
  // Rounding duplicates collapse: 3 points over [1, 2] are 1, 2.
  p.kind = ParamKind::kInt;
  p.low = 1;
  p.high = 2;
  v = grid_values(p);
  EXPECT_EQ(v.size(), 2u);
}

TEST(Space, ConditionsDecideWhichParametersAreActive) {
  auto sp = parse_space(kSpace);
  ASSERT_TRUE(sp.ok());
  Config c{{"max_num_seqs", int64_t(4)}, {"enable_chunked_prefill", false}};
  EXPECT_TRUE(validate_config(*sp, c).ok());
  c["prefill_chunk_size"] = int64_t(64);
  auto s = validate_config(*sp, c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("inactive"), std::string::npos) << s.message();
  c["enable_chunked_prefill"] = true;
  EXPECT_TRUE(validate_config(*sp, c).ok());
  c.erase("prefill_chunk_size");
  EXPECT_NE(validate_config(*sp, c).message().find("missing"), std::string::npos);
  c["prefill_chunk_size"] = int64_t(1000);
  EXPECT_NE(validate_config(*sp, c).message().find("outside its domain"), std::string::npos);
  c["prefill_chunk_size"] = int64_t(100);
  c["bogus"] = int64_t(1);
  EXPECT_NE(validate_config(*sp, c).message().find("not a parameter"), std::string::npos);
}

TEST(Space, LogSamplingStaysInBoundsAndCoversBothDecades) {
  auto sp = parse_space(R"(
name = "s"
adapter = "plumb"
[[param]]
name = "max_num_batched_tokens"
type = "int"
low = 10
high = 1000
log = true
[[param]]
name = "ttft_ms"
type = "float"
low = 0.001
high = 10.0
log = true
)");
  ASSERT_TRUE(sp.ok()) << sp.status().to_string();
  Rng rng(7);
  int below100 = 0, fbelow = 0;
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    Config c = sample_uniform(*sp, rng);
    int64_t x = std::get<int64_t>(c.at("max_num_batched_tokens"));
    double f = std::get<double>(c.at("ttft_ms"));
    ASSERT_GE(x, 10);
    ASSERT_LE(x, 1000);
    ASSERT_GE(f, 0.001);
    ASSERT_LE(f, 10.0);
    below100 += x < 100 ? 1 : 0;
    fbelow += f < 0.1 ? 1 : 0;  // 2 of 4 decades
  }
  // Log-uniform: about half below the geometric midpoint (a linear draw would give ~9% and ~1%).
  EXPECT_NEAR(double(below100) / n, 0.5, 0.05);
  EXPECT_NEAR(double(fbelow) / n, 0.5, 0.05);
}

TEST(Space, SeededSamplingIsReproducible) {
  auto sp = parse_space(kSpace);
  ASSERT_TRUE(sp.ok());
  Rng a(42), b(42), c(43);
  std::string sa, sb, sc;
  for (int i = 0; i < 20; ++i) {
    sa += config_key(sample_uniform(*sp, a));
    sb += config_key(sample_uniform(*sp, b));
    sc += config_key(sample_uniform(*sp, c));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Space, BadSpacesAreRefusedWithTheFieldNamed) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"name='x'\nadapter='plumb'\n", "no [[param]]"},
      {"adapter='plumb'\n[[param]]\nname='a'\ntype='bool'\n", "'name'"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='complex'\n", "unknown type"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='int'\nlow=5\nhigh=1\n", "low > high"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='int'\nlow=0\nhigh=4\nlog=true\n", "low > 0"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='int'\nlow=1\nhigh=4\ngrid=[8]\n", "outside"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='categorical'\n", "needs values"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='int'\nvalues=[1.5]\n", "integers"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='int'\nvalues=[1, 1e308]\n", "64-bit range"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='int'\nlow=0\nhigh=1e300\n", "64-bit"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='float'\nlow=-1.7e308\nhigh=1.7e308\n",
       "must be finite"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='float'\nlow=0\nhigh=inf\n", "must be finite"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='bool'\n[[param]]\nname='a'\ntype='bool'\n",
       "twice"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='bool'\nwhen={b=true}\n", "declared before"},
      {"name='x'\nadapter='plumb'\n[fixed]\na=1\n[[param]]\nname='a'\ntype='bool'\n", "both [fixed]"},
      {"name='x'\nadapter='plumb'\n[[param]]\nname='a'\ntype='bool'\nlimit=3\n", "unknown field"},
      {"name='x'\nadapter='plumb'\n[[param]\n", "invalid TOML"},
  };
  for (const auto& c : cases) {
    auto sp = parse_space(c.text);
    ASSERT_FALSE(sp.ok()) << c.text;
    EXPECT_EQ(sp.status().code(), Code::kInvalidArgument) << c.text;
    EXPECT_NE(sp.status().message().find(c.expect), std::string::npos) << sp.status().message();
  }
}

TEST(Space, ConfigFromJsonConvertsAndValidates) {
  auto sp = parse_space(kSpace);
  ASSERT_TRUE(sp.ok());
  auto o = json::parse_object(
      R"({"max_num_seqs": 4.0, "enable_chunked_prefill": true, "prefill_chunk_size": 100})");
  ASSERT_TRUE(o.ok());
  auto c = config_from_json(*sp, *o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(std::get<int64_t>(c->at("max_num_seqs")), 4);
  auto bad = json::parse_object(R"({"max_num_seqs": 3, "enable_chunked_prefill": false})");
  EXPECT_FALSE(config_from_json(*sp, *bad).ok());
}

// Every shipped space parses and names only parameters its adapter maps (a flag, a default or a
// placeholder); the plumb space's grid is finite.
TEST(Space, ShippedSpacesMatchTheirAdapters) {
  auto names = builtin_space_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
            (std::set<std::string>{"plumb", "plumb-cuda", "vllm", "sglang", "llamacpp"}));
  for (const auto& n : names) {
    auto sp = builtin_space(n);
    ASSERT_TRUE(sp.ok()) << n << ": " << sp.status().to_string();
    EXPECT_EQ(sp->adapter, n == "plumb-cuda" ? std::string("plumb") : n);
    auto ad = launch::builtin_adapter(sp->adapter);
    ASSERT_TRUE(ad.ok());
    std::set<std::string> known;
    for (const auto& f : ad->flags) known.insert(f.param);
    for (const auto& [k, v] : ad->defaults) known.insert(k);
    for (const auto& p : sp->params) EXPECT_TRUE(known.count(p.name)) << n << ": " << p.name;
    for (const auto& [k, v] : sp->fixed) EXPECT_TRUE(known.count(k)) << n << ": fixed " << k;
    // Each configuration renders into a command line (with a model where the adapter needs one).
    Rng rng(1);
    Config c = sample_uniform(*sp, rng);
    launch::Params params = sp->fixed;
    for (const auto& [k, v] : c) params[k] = v;
    if (sp->adapter != "plumb") params["model"] = std::string("some/model");
    auto spec = launch::render(*ad, params, 8000);
    EXPECT_TRUE(spec.ok()) << n << ": " << spec.status().to_string();
    auto g = enumerate_grid(*sp);
    EXPECT_TRUE(g.ok()) << n;
    // The stated defaults form a valid configuration (the bayes strategy's first point).
    Config d;
    for (const auto& p : sp->params)
      if (is_active(p, d) && p.default_value) d[p.name] = *p.default_value;
    EXPECT_TRUE(validate_config(*sp, d).ok()) << n << ": " << validate_config(*sp, d).message();
  }
}

// The plumb adapter's command line for the space's fixed parameters and `c`, one space after each word.
std::string plumb_command_line(const SearchSpace& sp, const Config& c) {
  auto ad = launch::builtin_adapter("plumb");
  EXPECT_TRUE(ad.ok());
  if (!ad.ok()) return "";
  launch::Params params = sp.fixed;
  for (const auto& [k, v] : c) params[k] = v;
  auto spec = launch::render(*ad, params, 8123);
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  std::string line;
  if (spec.ok())
    for (const auto& a : spec->argv) line += a + " ";
  return line;
}

// The CUDA space renders plumb serve's CUDA flags: the device, CUDA graphs as true|false, the
// memory share.
TEST(Space, PlumbCudaSpaceRendersTheCudaFlags) {
  auto sp = builtin_space("plumb-cuda");
  ASSERT_TRUE(sp.ok()) << sp.status().to_string();
  Config c{{"max_num_seqs", int64_t(128)},    {"max_num_batched_tokens", int64_t(2048)},
           {"enable_chunked_prefill", false}, {"kv_block_size", int64_t(32)},
           {"enable_prefix_caching", true},   {"cuda_graphs", false},
           {"gpu_memory_utilization", 0.75}};
  ASSERT_TRUE(validate_config(*sp, c).ok()) << validate_config(*sp, c).message();
  const std::string line = plumb_command_line(*sp, c);
  for (const char* want : {"--device cuda ", "--cuda-graphs=false ", "--gpu-memory-utilization 0.75 ",
                           "--max-num-seqs 128 ", "--enable-chunked-prefill=false ", "--engine llm "}) {
    EXPECT_NE(line.find(want), std::string::npos) << want << " in " << line;
  }
}

// Tensor parallelism as a knob (StudyOptions::tensor_parallel_sizes, which `plumb tune` fills in for
// plumb on CUDA with several cards per trial): added to the space with its sizes, rendered as
// --tensor-parallel-size, kept out where there is one size or the space has its own; stored with
// the study's options (and absent from them without the knob).
TEST(Space, TensorParallelSizeIsAKnobOnlyWhereTheModelSplitsMoreThanOneWay) {
  auto sp = builtin_space("plumb-cuda");
  ASSERT_TRUE(sp.ok());
  const size_t n = sp->params.size();
  add_tensor_parallel_knob(*sp, {1});
  EXPECT_EQ(sp->params.size(), n);
  add_tensor_parallel_knob(*sp, {1, 2, 4});
  ASSERT_EQ(sp->params.size(), n + 1);
  EXPECT_EQ(sp->params.back().name, "tensor_parallel_size");
  EXPECT_EQ(grid_values(sp->params.back()), (std::vector<ParamValue>{int64_t(1), int64_t(2), int64_t(4)}));
  add_tensor_parallel_knob(*sp, {1, 2});  // already there: unchanged
  EXPECT_EQ(sp->params.size(), n + 1);
  Config c{{"max_num_seqs", int64_t(8)},      {"max_num_batched_tokens", int64_t(512)},
           {"enable_chunked_prefill", false}, {"kv_block_size", int64_t(16)},
           {"enable_prefix_caching", true},   {"cuda_graphs", true},
           {"gpu_memory_utilization", 0.9},   {"tensor_parallel_size", int64_t(4)}};
  ASSERT_TRUE(validate_config(*sp, c).ok()) << validate_config(*sp, c).message();
  c["tensor_parallel_size"] = int64_t(3);
  EXPECT_FALSE(validate_config(*sp, c).ok());
  c["tensor_parallel_size"] = int64_t(2);
  const std::string line = plumb_command_line(*sp, c);
  EXPECT_NE(line.find("--tensor-parallel-size 2 "), std::string::npos) << line;
  // A space that fixes the size keeps it.
  auto fixed = builtin_space("plumb-cuda");
  ASSERT_TRUE(fixed.ok());
  fixed->fixed["tensor_parallel_size"] = int64_t(2);
  add_tensor_parallel_knob(*fixed, {1, 2});
  EXPECT_EQ(fixed->params.size(), n);

  StudyOptions o;
  EXPECT_FALSE(o.to_json().contains("tensor_parallel_sizes"));
  o.tensor_parallel_sizes = {1, 2, 4};
  auto back = StudyOptions::from_json(o.to_json());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->tensor_parallel_sizes, (std::vector<int64_t>{1, 2, 4}));
}

// llama-server's knobs in the built-in space, rendered by the llamacpp adapter into the flags
// llama.cpp c392e50 takes (common/arg.cpp): -np, -c, -b, -ub, --cont-batching, -fa, -ctk, -ctv, -t.
TEST(Space, LlamaCppSpaceRendersLlamaServersFlags) {
  auto sp = builtin_space("llamacpp");
  ASSERT_TRUE(sp.ok()) << sp.status().to_string();
  auto ad = launch::builtin_adapter("llamacpp");
  ASSERT_TRUE(ad.ok());
  std::set<std::string> names;
  for (const auto& p : sp->params) names.insert(p.name);
  EXPECT_EQ(names, (std::set<std::string>{"max_num_seqs", "max_model_len", "max_num_batched_tokens",
                                          "ubatch_size", "continuous_batching", "flash_attn", "cache_type_k",
                                          "cache_type_v", "threads"}));
  Config c{{"max_num_seqs", int64_t(8)},
           {"max_model_len", int64_t(65536)},
           {"max_num_batched_tokens", int64_t(2048)},
           {"ubatch_size", int64_t(512)},
           {"continuous_batching", true},
           {"flash_attn", true},
           {"cache_type_k", std::string("q8_0")},
           {"cache_type_v", std::string("q4_0")},
           {"threads", int64_t(8)}};
  ASSERT_TRUE(validate_config(*sp, c).ok()) << validate_config(*sp, c).message();
  launch::Params params = c;
  params["model"] = std::string("/m/llama.gguf");
  params["n_gpu_layers"] = int64_t(99);
  auto on = launch::render(*ad, params, 8080);
  ASSERT_TRUE(on.ok()) << on.status().to_string();
  EXPECT_EQ(on->argv, (std::vector<std::string>{"llama-server",
                                                "-m",
                                                "/m/llama.gguf",
                                                "--host",
                                                "127.0.0.1",
                                                "--port",
                                                "8080",
                                                "-np",
                                                "8",
                                                "-c",
                                                "65536",
                                                "-b",
                                                "2048",
                                                "-ub",
                                                "512",
                                                "--cont-batching",
                                                "-t",
                                                "8",
                                                "-ngl",
                                                "99",
                                                "-fa",
                                                "-ctk",
                                                "q8_0",
                                                "-ctv",
                                                "q4_0"}));
  // Without flash attention the V cache type is inactive (llama.cpp refuses a quantized V cache
  // without it), and no -fa is passed; continuous batching off is --no-cont-batching.
  Config off = c;
  off["flash_attn"] = false;
  off["continuous_batching"] = false;
  EXPECT_FALSE(validate_config(*sp, off).ok());  // cache_type_v is set but inactive
  off.erase("cache_type_v");
  ASSERT_TRUE(validate_config(*sp, off).ok()) << validate_config(*sp, off).message();
  launch::Params p2 = off;
  p2["model"] = std::string("/m/llama.gguf");
  auto r = launch::render(*ad, p2, 8080);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->argv, (std::vector<std::string>{"llama-server",
                                               "-m",
                                               "/m/llama.gguf",
                                               "--host",
                                               "127.0.0.1",
                                               "--port",
                                               "8080",
                                               "-np",
                                               "8",
                                               "-c",
                                               "65536",
                                               "-b",
                                               "2048",
                                               "-ub",
                                               "512",
                                               "--no-cont-batching",
                                               "-t",
                                               "8",
                                               "-ctk",
                                               "q8_0"}));
  // A cache type llama.cpp does not take is outside the space.
  Config bad = c;
  bad["cache_type_k"] = std::string("fp8");
  EXPECT_FALSE(validate_config(*sp, bad).ok());
}

}  // namespace
}  // namespace plumb::tune
