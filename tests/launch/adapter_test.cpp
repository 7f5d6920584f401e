#include "launch/adapter.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace plumb::launch {
namespace {

using Argv = std::vector<std::string>;

LaunchSpec render_ok(const std::string& adapter, const Params& p, uint16_t port = 8000) {
  auto a = builtin_adapter(adapter);
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  auto s = render(*a, p, port);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : LaunchSpec{};
}

Params tuned() {
  return {{"model", std::string("meta-llama/Llama-3.1-8B-Instruct")},
          {"max_num_seqs", int64_t(128)},
          {"max_num_batched_tokens", int64_t(8192)},
          {"enable_chunked_prefill", true},
          {"kv_block_size", int64_t(16)},
          {"enable_prefix_caching", false},
          {"gpu_memory_utilization", 0.9}};
}

TEST(Adapter, BuiltinNames) {
  EXPECT_EQ(builtin_adapter_names(), (std::vector<std::string>{"plumb", "vllm", "sglang", "llamacpp"}));
  for (const auto& n : builtin_adapter_names()) EXPECT_TRUE(builtin_adapter(n).ok()) << n;
  auto bad = builtin_adapter("tgi");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kNotFound);
  EXPECT_NE(bad.status().message().find("plumb, vllm, sglang, llamacpp"), std::string::npos);
}

TEST(Adapter, VllmCommandLine) {
  LaunchSpec s = render_ok("vllm", tuned());
  EXPECT_EQ(s.argv, (Argv{"vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--host", "127.0.0.1",
                          "--port", "8000", "--max-num-seqs", "128", "--max-num-batched-tokens", "8192",
                          "--enable-chunked-prefill", "--block-size", "16", "--no-enable-prefix-caching",
                          "--gpu-memory-utilization", "0.9"}));
  EXPECT_EQ(s.health_url, "http://127.0.0.1:8000/health");
  EXPECT_EQ(s.host, "127.0.0.1");
  EXPECT_EQ(s.port, 8000);
  EXPECT_EQ(s.log_file, "vllm-8000.log");
  EXPECT_EQ(s.env, (std::map<std::string, std::string>{{"VLLM_NO_USAGE_STATS", "1"}}));
  EXPECT_EQ(s.readiness_timeout, std::chrono::seconds(900));

  Params p = tuned();
  p["enable_prefix_caching"] = true;
  p["enable_chunked_prefill"] = false;
  EXPECT_EQ(
      render_ok("vllm", p).argv,
      (Argv{"vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--host", "127.0.0.1", "--port", "8000",
            "--max-num-seqs", "128", "--max-num-batched-tokens", "8192", "--no-enable-chunked-prefill",
            "--block-size", "16", "--enable-prefix-caching", "--gpu-memory-utilization", "0.9"}));
}

TEST(Adapter, SglangCommandLine) {
  Params p = tuned();
  p.erase("enable_chunked_prefill");  // SGLang has no switch for it; its chunk size is the knob
  p["prefill_chunk_size"] = int64_t(4096);
  LaunchSpec s = render_ok("sglang", p, 30000);
  EXPECT_EQ(s.argv, (Argv{"python3",
                          "-m",
                          "sglang.launch_server",
                          "--model-path",
                          "meta-llama/Llama-3.1-8B-Instruct",
                          "--host",
                          "127.0.0.1",
                          "--port",
                          "30000",
                          "--max-running-requests",
                          "128",
                          "--max-prefill-tokens",
                          "8192",
                          "--chunked-prefill-size",
                          "4096",
                          "--page-size",
                          "16",
                          "--disable-radix-cache",
                          "--mem-fraction-static",
                          "0.9"}));
  EXPECT_EQ(s.health_url, "http://127.0.0.1:30000/health");
  // Prefix caching on is SGLang's default: nothing is emitted.
  p["enable_prefix_caching"] = true;
  Argv on = render_ok("sglang", p, 30000).argv;
  EXPECT_EQ(std::count(on.begin(), on.end(), "--disable-radix-cache"), 0);
  EXPECT_EQ(on.size(), s.argv.size() - 1);
}

TEST(Adapter, SglangRejectsKnobItDoesNotHave) {
  auto a = builtin_adapter("sglang");
  ASSERT_TRUE(a.ok());
  auto s = render(*a, tuned(), 30000);  // enable_chunked_prefill is not an SGLang parameter
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("has no parameter 'enable_chunked_prefill'"), std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("prefill_chunk_size"), std::string::npos);  // lists the known ones
}

TEST(Adapter, LlamaCppCommandLine) {
  Params p{{"model", std::string("/models/llama-3.1-8b-q4_k_m.gguf")},
           {"max_num_seqs", int64_t(4)},
           {"max_model_len", int64_t(16384)},
           {"max_num_batched_tokens", int64_t(2048)},
           {"ubatch_size", int64_t(512)},
           {"continuous_batching", true},
           {"threads", int64_t(16)}};
  LaunchSpec s = render_ok("llamacpp", p, 8080);
  EXPECT_EQ(s.argv, (Argv{"llama-server", "-m", "/models/llama-3.1-8b-q4_k_m.gguf", "--host", "127.0.0.1",
                          "--port", "8080", "-np", "4", "-c", "16384", "-b", "2048", "-ub", "512",
                          "--cont-batching", "-t", "16"}));
  p["continuous_batching"] = false;
  Argv off = render_ok("llamacpp", p, 8080).argv;
  EXPECT_EQ(off[15], "--no-cont-batching");
}

TEST(Adapter, PlumbCommandLine) {
  Params p{{"plumb_binary", std::string("/opt/plumb/bin/plumb")},
           {"engine", std::string("synthetic")},
           {"max_num_seqs", int64_t(8)},
           {"enable_prefix_caching", true},
           {"enable_chunked_prefill", false},
           {"threads", int64_t(2)},
           {"extra_args", std::vector<std::string>{"--log-level", "warn"}}};
  LaunchSpec s = render_ok("plumb", p, 41000);
  EXPECT_EQ(s.argv, (Argv{"/opt/plumb/bin/plumb", "serve", "--host", "127.0.0.1", "--port", "41000",
                          "--engine", "synthetic", "--max-num-seqs", "8", "--enable-chunked-prefill=false",
                          "--enable-prefix-caching=true", "--threads", "2", "--log-level", "warn"}));
  EXPECT_EQ(s.log_file, "plumb-serve-41000.log");
  // Default binary: "plumb" on PATH.
  EXPECT_EQ(render_ok("plumb", {}, 41000).argv[0], "plumb");
  // The CUDA knobs, tensor parallelism among them.
  Params g{{"device", std::string("cuda")}, {"tensor_parallel_size", int64_t(2)}, {"cuda_graphs", false}};
  EXPECT_EQ(render_ok("plumb", g, 41000).argv,
            (Argv{"plumb", "serve", "--host", "127.0.0.1", "--port", "41000", "--device", "cuda",
                  "--cuda-graphs=false", "--tensor-parallel-size", "2"}));
}

TEST(Adapter, TypeErrorsAndMissingPlaceholders) {
  auto a = builtin_adapter("vllm");
  ASSERT_TRUE(a.ok());
  Params p = tuned();
  p["max_num_seqs"] = std::string("many");
  auto s = render(*a, p, 8000);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("parameter 'max_num_seqs' must be a int, got many"), std::string::npos)
      << s.status().message();
  p = tuned();
  p["gpu_memory_utilization"] = int64_t(1);  // an int is fine where a float is expected
  EXPECT_TRUE(render(*a, p, 8000).ok());
  p = tuned();
  p["enable_prefix_caching"] = int64_t(1);
  EXPECT_FALSE(render(*a, p, 8000).ok());
  p = tuned();
  p.erase("model");
  s = render(*a, p, 8000);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("placeholder {model}"), std::string::npos) << s.status().message();
  p = tuned();
  p["port"] = int64_t(1);
  EXPECT_FALSE(render(*a, p, 8000).ok());
  EXPECT_FALSE(render(*a, tuned(), 0).ok());
}

TEST(Adapter, CustomAdapterFromToml) {
  auto a = parse_adapter(R"(
name = "toy"
command = ["toy-server", "--listen={host}:{port}"]
health_url = "http://{host}:{port}/ready"
readiness_timeout_s = 2.5
[env]
TOY_HOME = "/tmp/toy-{port}"
[defaults]
host = "localhost"
ratio = 0.25
[[flags]]
param = "ratio"
flag = "--ratio"
type = "float"
joined = true
[[flags]]
param = "fast"
flag = "--fast"
type = "bool"
)");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->readiness_timeout, std::chrono::milliseconds(2500));
  EXPECT_EQ(a->log_file, "toy-{port}.log");
  auto s = render(*a, {{"fast", true}}, 9);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->argv, (Argv{"toy-server", "--listen=localhost:9", "--ratio=0.25", "--fast"}));
  EXPECT_EQ(s->env.at("TOY_HOME"), "/tmp/toy-9");
  EXPECT_EQ(s->health_url, "http://localhost:9/ready");
  s = render(*a, {{"fast", false}, {"ratio", 1e-5}}, 9);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->argv, (Argv{"toy-server", "--listen=localhost:9", "--ratio=1e-05"}));
}

TEST(Adapter, BadAdapterFilesAreClearErrors) {
  struct Case {
    const char* toml;
    const char* expect;
  };
  const Case cases[] = {
      {"name = \"x\"\ncommand = [\"a\"\n", "invalid TOML"},
      {"command = [\"a\"]\nhealth_url = \"h\"", "missing field 'name'"},
      {"name = \"x\"\nhealth_url = \"h\"", "missing field 'command'"},
      {"name = \"x\"\ncommand = []\nhealth_url = \"h\"", "field 'command' is empty"},
      {"name = \"x\"\ncommand = [\"a\"]", "missing field 'health_url'"},
      {"name = \"x\"\ncommand = [\"a\"]\nhealth_url = \"h\"\nreadiness_timeout_s = 0", "must be > 0"},
      {"name = \"x\"\ncommand = [\"a\"]\nhealth_url = \"h\"\n[[flags]]\nparam = \"p\"\nflag = \"--p\"\ntype "
       "= \"real\"",
       "unknown type 'real'"},
      {"name = \"x\"\ncommand = [\"a\"]\nhealth_url = \"h\"\n[[flags]]\nparam = \"p\"\ntype = \"int\"",
       "missing field 'flag'"},
      {"name = \"x\"\ncommand = [\"a\"]\nhealth_url = \"h\"\n[[flags]]\nparam = \"p\"\nflag = \"--p\"\ntype "
       "= "
       "\"int\"\n[[flags]]\nparam = \"p\"\nflag = \"--q\"\ntype = \"int\"",
       "mapped twice"},
      {"name = \"x\"\ncommand = [\"a\"]\nhealth_url = \"h\"\n[[flags]]\nparam = \"p\"\nflag = \"--p\"\ntype "
       "= "
       "\"bool\"\nbool_style = \"maybe\"",
       "bool_style"},
  };
  for (const auto& c : cases) {
    auto a = parse_adapter(c.toml);
    ASSERT_FALSE(a.ok()) << c.toml;
    EXPECT_EQ(a.status().code(), Code::kInvalidArgument);
    EXPECT_NE(a.status().message().find(c.expect), std::string::npos) << a.status().message();
  }
}

TEST(Adapter, FormatValue) {
  EXPECT_EQ(format_value(ParamValue{true}), "true");
  EXPECT_EQ(format_value(ParamValue{int64_t(-3)}), "-3");
  EXPECT_EQ(format_value(ParamValue{0.9}), "0.9");
  EXPECT_EQ(format_value(ParamValue{2.0}), "2");
  EXPECT_EQ(format_value(ParamValue{std::string("x y")}), "x y");
}

TEST(EngineConfig, ParsesHashesAndResolvesRelativeAdapter) {
  auto c = parse_engine_config("adapter = \"plumb\"\n[params]\nmax_num_seqs = 8\nengine = \"synthetic\"\n");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->resolved.name, "plumb");
  EXPECT_EQ(engine_config_json(*c),
            R"({"adapter":"plumb","params":{"engine":"synthetic","max_num_seqs":8}})");

  std::string dir = ::testing::TempDir() + "/launch_cfg_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/toy.toml")
      << "name = \"toy\"\ncommand = [\"toy\"]\nhealth_url = \"http://x:{port}/\"\n";
  std::ofstream(dir + "/arm.toml") << "adapter = \"toy.toml\"\n";
  auto d = load_engine_config(dir + "/arm.toml");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->resolved.name, "toy");

  auto bad = parse_engine_config("adapter = \"plumb\"\nport = 3\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown field 'port'"), std::string::npos);
  bad = parse_engine_config("adapter = \"nope\"\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace plumb::launch
