// Tokenizer throughput (MB/s of UTF-8 text) on the reference fixture tokenizers.
//
// Corpus: the English prose of /usr/share/common-licenses (Debian's license texts, ~0.3 MB) plus the
// multilingual fixture case texts, repeated to 4 MB; or seeded synthetic words when the license
// texts are missing (the label says which). The fixture vocabularies are small (~1-2K tokens), so a
// real 128K-151K vocabulary is somewhat slower on uncached words; the word cache makes repeated
// words (most of natural text) independent of vocabulary size.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/json.h"
#include "core/random.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

using plumb::engine::StreamDecoder;
using plumb::engine::Tokenizer;

const std::string kFixtures = std::string(PLUMB_SOURCE_DIR) + "/tests/fixtures/tokenizers/";
constexpr size_t kCorpusBytes = 4u << 20;

struct Corpus {
  std::string text;
  std::string label;
};

const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus r;
    std::string base;
    namespace fs = std::filesystem;
    const char* dir = "/usr/share/common-licenses";
    if (fs::exists(dir)) {
      std::vector<std::string> names;
      for (const auto& e : fs::directory_iterator(dir)) {
        if (e.is_regular_file()) names.push_back(e.path().string());
      }
      std::sort(names.begin(), names.end());
      for (const auto& n : names) {
        if (auto t = plumb::read_file(n); t.ok()) base += *t;
      }
    }
    r.label = base.empty() ? "synthetic" : "licenses+fixtures";
    if (auto cases = plumb::json::parse_file(kFixtures + "bytelevel_bpe/cases.json"); cases.ok()) {
      for (const auto& cv : cases->as_object().at("cases").as_array()) {
        base += std::string(cv.as_object().at("text").as_string());
        base += "\n";
      }
    }
    if (base.size() < 1000) {
      plumb::Rng rng(42);
      const char* words[] = {"the",   "model", "server", "token", "latency",
                             "batch", "of",    "and",    "12",    "décodé"};
      while (base.size() < (1u << 20)) {
        base += words[rng.next_u64() % 10];
        base += rng.next_u64() % 8 ? " " : ".\n";
      }
    }
    while (r.text.size() < kCorpusBytes) r.text += base;
    r.text.resize(kCorpusBytes);
    // Do not cut a UTF-8 character in half.
    while (!r.text.empty() && (uint8_t(r.text.back()) & 0xC0) == 0x80) r.text.pop_back();
    if (!r.text.empty() && uint8_t(r.text.back()) >= 0xC0) r.text.pop_back();
    return r;
  }();
  return c;
}

std::unique_ptr<Tokenizer> load(const std::string& name) {
  auto t = Tokenizer::load(kFixtures + name);
  return t.ok() ? std::move(t).value() : nullptr;
}

void BM_Encode(benchmark::State& state, const std::string& name) {
  auto tok = load(name);
  if (!tok) {
    state.SkipWithError(("cannot load fixture " + name).c_str());
    return;
  }
  const Corpus& c = corpus();
  size_t n = 0;
  for (auto _ : state) {
    auto ids = tok->encode(c.text, false);
    n = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(c.text.size()));
  state.counters["tokens"] = double(n);
  state.SetLabel(c.label);
}

// A fresh tokenizer per iteration: the word cache starts empty (first document of a run).
void BM_EncodeColdCache(benchmark::State& state, const std::string& name) {
  const Corpus& c = corpus();
  std::string_view text = std::string_view(c.text).substr(0, 1u << 20);
  while (!text.empty() && (uint8_t(text.back()) & 0xC0) == 0x80) text.remove_suffix(1);
  if (!text.empty() && uint8_t(text.back()) >= 0xC0) text.remove_suffix(1);
  for (auto _ : state) {
    state.PauseTiming();
    auto tok = load(name);
    state.ResumeTiming();
    if (!tok) {
      state.SkipWithError(("cannot load fixture " + name).c_str());
      return;
    }
    auto ids = tok->encode(text, false);
    benchmark::DoNotOptimize(ids.data());
    state.PauseTiming();
    tok.reset();
    state.ResumeTiming();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.SetLabel(c.label);
}

void BM_Decode(benchmark::State& state, const std::string& name) {
  auto tok = load(name);
  if (!tok) {
    state.SkipWithError(("cannot load fixture " + name).c_str());
    return;
  }
  const Corpus& c = corpus();
  auto ids = tok->encode(c.text, false);
  for (auto _ : state) {
    std::string s = tok->decode(ids);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(c.text.size()));
}

// Token-by-token streaming, as a server does per generated token.
void BM_StreamDecode(benchmark::State& state, const std::string& name) {
  auto tok = load(name);
  if (!tok) {
    state.SkipWithError(("cannot load fixture " + name).c_str());
    return;
  }
  const Corpus& c = corpus();
  auto ids = tok->encode(std::string_view(c.text).substr(0, 1u << 18), false);
  for (auto _ : state) {
    StreamDecoder d(*tok);
    size_t total = 0;
    for (int32_t id : ids) total += d.push(id).size();
    total += d.flush().size();
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(ids.size()));
}

void BM_Load(benchmark::State& state, const std::string& name) {
  for (auto _ : state) {
    auto tok = load(name);
    benchmark::DoNotOptimize(tok.get());
  }
}

BENCHMARK_CAPTURE(BM_Encode, llama3_bpe, std::string("llama3_bpe"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, bytelevel_bpe, std::string("bytelevel_bpe"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, sentencepiece_bpe, std::string("sentencepiece_bpe"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeColdCache, llama3_bpe, std::string("llama3_bpe"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, llama3_bpe, std::string("llama3_bpe"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, sentencepiece_bpe, std::string("sentencepiece_bpe"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StreamDecode, llama3_bpe, std::string("llama3_bpe"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StreamDecode, sentencepiece_bpe, std::string("sentencepiece_bpe"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Load, llama3_bpe, std::string("llama3_bpe"))->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
