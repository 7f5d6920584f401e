// The CUDA search loop: generator spread and neighbourhood, the external proposer, compile and screen
// in children, the sanitized best.
#include "kernels/cuda/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/file.h"
#include "core/subprocess.h"
#include "kernels/cuda/abi.h"

namespace plumb::kernels::cuda {
namespace {

constexpr int kSchemaVersion = 1;

std::string describe(const Variant& v) {
  return fmt::format("block {} rows/block {} vector {} items/thread {} grid cap {} {}", v.block_threads,
                     v.rows_per_block, v.vector_width, v.items_per_thread, v.max_blocks,
                     v.fused ? "fused" : "unfused");
}

// A proposer's or a variant's name as a file stem.
std::string file_stem(const std::string& name) {
  return name.empty() ? "candidate" : safe_file_name(name, 120);
}

class Search {
 public:
  explicit Search(const CudaSearchOptions& o) : o_(o), variants_(generate_variants(o.screen.op)) {}

  Result<CudaSearchResult> run() {
    std::error_code ec;
    std::filesystem::create_directories(o_.out_dir + "/candidates", ec);
    if (ec) return io_error("creating " + o_.out_dir + "/candidates: " + ec.message());
    for (int e = 1; e <= o_.episodes; ++e) {
      say(fmt::format("episode {}/{}", e, o_.episodes));
      for (size_t i : next_variants(e))
        PLUMB_RETURN_IF_ERROR(
            try_source(variants_[i].name, "generator", describe(variants_[i]), variants_[i].source, e));
      for (int k = 0; !o_.proposer_argv.empty() && k < o_.proposals_per_episode; ++k) {
        PLUMB_RETURN_IF_ERROR(propose(e, k));
      }
      r_.best = ranked().empty() ? -1 : ranked()[0];
      PLUMB_RETURN_IF_ERROR(
          write_file_atomic(fmt::format("{}/experience-{}.json", o_.out_dir, e),
                            json::dump_pretty(cuda_experience(r_.tried, r_.best, e)) + "\n"));
    }
    PLUMB_RETURN_IF_ERROR(pick_sanitized_best());
    return r_;
  }

 private:
  void say(const std::string& m) const {
    if (o_.progress) o_.progress(m);
  }

  // Passing candidates by utility, highest first, without those dropped by the sanitizers.
  std::vector<int> ranked() const {
    std::vector<int> idx;
    for (size_t i = 0; i < r_.tried.size(); ++i) {
      const CudaTried& t = r_.tried[i];
      if (t.screened && t.screen.verdict == ScreenVerdict::kPass && t.error.empty()) idx.push_back(int(i));
    }
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int a, int b) { return r_.tried[size_t(a)].utility > r_.tried[size_t(b)].utility; });
    return idx;
  }

  std::vector<size_t> next_variants(int episode) const {
    std::set<std::string> tried;
    for (const auto& t : r_.tried) tried.insert(t.name);
    const auto n = size_t(std::max(0, o_.candidates_per_episode));
    const int best = ranked().empty() ? -1 : ranked()[0];
    const Variant* anchor = nullptr;
    for (const auto& v : variants_)
      if (best >= 0 && v.name == r_.tried[size_t(best)].name) anchor = &v;
    if (episode == 1 || anchor == nullptr) {
      std::vector<size_t> out;
      for (size_t i : spread(variants_.size(), n + tried.size()))
        if (!tried.count(variants_[i].name) && out.size() < n) out.push_back(i);
      return out;
    }
    return nearest_untried(variants_, *anchor, tried, n);
  }

  // Compiles and screens one source (no sanitizers); a no_device verdict stops the search.
  Status try_source(const std::string& name, const std::string& origin, const std::string& rationale,
                    const std::string& source, int episode) {
    CudaTried t;
    t.name = name, t.origin = origin, t.rationale = rationale, t.episode = episode;
    const std::string stem = o_.out_dir + "/candidates/" + file_stem(name);
    PLUMB_RETURN_IF_ERROR(write_file_atomic(stem + ".cu", source));
    PLUMB_ASSIGN_OR_RETURN(t.compile,
                           compile_in_child(o_.plumb_exe, stem + ".cu", stem + "/compile", o_.compile));
    if (t.compile.verdict == CompileVerdict::kOk) {
      ScreenOptions so = o_.screen;
      so.sanitizers.clear();
      PLUMB_ASSIGN_OR_RETURN(t.screen,
                             screen_in_child(o_.plumb_exe, t.compile.cubin_path, stem + "/screen", so));
      t.screened = true;
      if (t.screen.verdict == ScreenVerdict::kNoDevice) {
        return unavailable(
            fmt::format("{}; nothing can be screened (the candidates compiled so far are in {}/candidates)",
                        t.screen.reason, o_.out_dir));
      }
      if (t.screen.verdict == ScreenVerdict::kPass && t.screen.copy_gb_s > 0)
        t.utility = t.screen.implied_gb_s / t.screen.copy_gb_s;
    }
    say(fmt::format("  {:<44} {}", name,
                    !t.screened ? std::string(verdict_name(t.compile.verdict))
                    : t.screen.verdict == ScreenVerdict::kPass
                        ? fmt::format("pass, {:.2f} us, u {:.3f}", t.screen.time.median_us, t.utility)
                        : std::string(verdict_name(t.screen.verdict))));
    r_.tried.push_back(std::move(t));
    return Status::Ok();
  }

  // One proposal: the context on stdin, a candidate out; a failure is recorded as tried.
  Status propose(int episode, int k) {
    const std::string stem = fmt::format("{}/candidates/proposal-e{}-{}", o_.out_dir, episode, k);
    const json::object ctx = cuda_proposer_context(o_, r_.tried, ranked().empty() ? -1 : ranked()[0]);
    PLUMB_RETURN_IF_ERROR(write_file_atomic(stem + ".context.json", json::dump_pretty(ctx) + "\n"));
    auto fail = [&](const std::string& why) {
      CudaTried t;
      t.name = fmt::format("proposal-e{}-{}", episode, k), t.origin = "proposer", t.episode = episode;
      t.error = why;
      say("  " + t.name + ": " + why);
      r_.tried.push_back(std::move(t));
      return Status::Ok();
    };
    auto out = run_with_stdin(o_.proposer_argv, json::dump(ctx), o_.proposer_timeout);
    if (!out.ok()) return fail("the proposer failed: " + out.status().message());
    auto p = json::parse_object(*out);
    if (!p.ok()) return fail("the proposer's output is not one JSON object: " + p.status().message());
    auto source = json::string_at(*p, "source");
    if (!source || source->empty()) return fail("the proposer's output has no \"source\" (CUDA C++ text)");
    std::string name = json::string_at(*p, "name").value_or("");
    if (name.empty()) name = fmt::format("proposal-e{}-{}", episode, k);
    return try_source(name, "proposer", json::string_at(*p, "rationale").value_or(""), *source, episode);
  }

  // The best passing candidate screened again with the sanitizers; one that fails them is dropped
  // (its reason kept) and the next tried, three at most.
  Status pick_sanitized_best() {
    r_.best = -1;
    const std::vector<int> order = ranked();
    for (size_t k = 0; k < order.size() && k < 3; ++k) {
      CudaTried& t = r_.tried[size_t(order[k])];
      if (o_.screen.sanitizers.empty()) {
        r_.best = order[k];
        return Status::Ok();
      }
      say(fmt::format("compute-sanitizer over the best, {}", t.name));
      const std::string stem = o_.out_dir + "/candidates/" + file_stem(t.name);
      PLUMB_ASSIGN_OR_RETURN(ScreenResult s, screen_in_child(o_.plumb_exe, t.compile.cubin_path,
                                                             stem + "/sanitized", o_.screen));
      t.screen.sanitizers = s.sanitizers;
      if (s.verdict == ScreenVerdict::kPass) {
        r_.best = order[k];
        return Status::Ok();
      }
      t.error = fmt::format("dropped as best: {}: {}", verdict_name(s.verdict), s.reason);
      say("  " + t.error);
    }
    return Status::Ok();
  }

  const CudaSearchOptions& o_;
  std::vector<Variant> variants_;
  CudaSearchResult r_;
};

json::object tried_json(const CudaTried& t) {
  json::object o{{"name", t.name},
                 {"origin", t.origin},
                 {"episode", t.episode},
                 {"rationale", t.rationale},
                 {"compile", std::string(verdict_name(t.compile.verdict))},
                 {"utility", t.utility},
                 {"error", t.error}};
  if (t.screened) {
    o["verdict"] = std::string(verdict_name(t.screen.verdict));
    o["reason"] = t.screen.reason;
    o["median_us"] = t.screen.time.median_us;
  } else {
    o["verdict"] = t.error.empty() ? std::string(verdict_name(t.compile.verdict)) : "proposal_failed";
    o["reason"] = t.error.empty() ? t.compile.message : t.error;
    o["median_us"] = 0.0;
  }
  return o;
}

}  // namespace

int variant_distance(const Variant& a, const Variant& b) {
  return int(a.block_threads != b.block_threads) + int(a.rows_per_block != b.rows_per_block) +
         int(a.vector_width != b.vector_width) + int(a.items_per_thread != b.items_per_thread) +
         int(a.max_blocks != b.max_blocks) + int(a.fused != b.fused);
}

std::vector<size_t> nearest_untried(const std::vector<Variant>& all, const Variant& best,
                                    const std::set<std::string>& tried, size_t n) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < all.size(); ++i)
    if (!tried.count(all[i].name)) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return variant_distance(all[a], best) < variant_distance(all[b], best);
  });
  if (idx.size() > n) idx.resize(n);
  return idx;
}

std::vector<size_t> spread(size_t count, size_t n) {
  std::vector<size_t> out;
  if (count == 0 || n == 0) return out;
  n = std::min(n, count);
  for (size_t k = 0; k < n; ++k) out.push_back(k * count / n);
  return out;
}

json::object cuda_proposer_context(const CudaSearchOptions& o, const std::vector<CudaTried>& tried,
                                   int best) {
  json::array ts;
  for (const auto& t : tried) ts.push_back(tried_json(t));
  json::value b = nullptr;
  if (best >= 0)
    b = json::object{{"name", tried[size_t(best)].name}, {"utility", tried[size_t(best)].utility}};
  return {{"schema_version", kSchemaVersion},
          {"op", std::string(op_name(o.screen.op))},
          {"rows", o.screen.rows_max},
          {"cols", o.screen.cols},
          {"abi", std::string(abi_header_text())},
          {"utility", "implied bandwidth / measured copy bandwidth (1 = the roofline)"},
          {"tried", std::move(ts)},
          {"best", std::move(b)}};
}

json::object cuda_experience(const std::vector<CudaTried>& tried, int best, int episode) {
  std::map<std::string, int64_t> verdicts;
  std::map<std::string, double> by_origin;
  for (const auto& t : tried) {
    const json::object j = tried_json(t);
    verdicts[json::string_at(j, "verdict").value_or("")]++;
    double& u = by_origin[t.origin];
    u = std::max(u, t.utility);
  }
  json::object v, o;
  for (const auto& [k, n] : verdicts) v[k] = n;
  for (const auto& [k, u] : by_origin) o[k] = u;
  json::value b = nullptr;
  if (best >= 0)
    b = json::object{{"name", tried[size_t(best)].name}, {"utility", tried[size_t(best)].utility}};
  return {{"schema_version", kSchemaVersion},       {"episode", episode},
          {"tried", int64_t(tried.size())},         {"verdicts", std::move(v)},
          {"best_utility_by_origin", std::move(o)}, {"best", std::move(b)}};
}

Result<CudaSearchResult> run_cuda_search(const CudaSearchOptions& o) {
  if (o.episodes < 1) return invalid_argument("--episodes must be at least 1");
  if (o.candidates_per_episode < 0 || o.proposals_per_episode < 0)
    return invalid_argument("--candidates and --proposals must not be negative");
  if (o.candidates_per_episode == 0 && o.proposer_argv.empty())
    return invalid_argument("nothing to search: --candidates 0 and no --proposer");
  Search s(o);
  PLUMB_ASSIGN_OR_RETURN(CudaSearchResult r, s.run());
  PLUMB_RETURN_IF_ERROR(
      write_file_atomic(o.out_dir + "/search.json", json::dump_pretty(cuda_search_json(o, r)) + "\n"));
  return r;
}

json::object cuda_search_json(const CudaSearchOptions& o, const CudaSearchResult& r) {
  json::array ts;
  for (const auto& t : r.tried) {
    json::object j = tried_json(t);
    json::array san;
    for (const auto& s : t.screen.sanitizers) san.push_back(to_json(s));
    j["sanitizers"] = std::move(san);
    ts.push_back(std::move(j));
  }
  json::array tools;
  for (const auto& t : o.screen.sanitizers) tools.emplace_back(t);
  json::value best = nullptr;
  if (r.best >= 0) {
    const CudaTried& t = r.tried[size_t(r.best)];
    best = json::object{{"name", t.name},
                        {"utility", t.utility},
                        {"median_us", t.screen.time.median_us},
                        {"source", o.out_dir + "/candidates/" + file_stem(t.name) + ".cu"},
                        {"cubin", t.compile.cubin_path},
                        {"cubin_sha256", t.compile.cubin_sha256},
                        {"source_sha256", t.compile.source_sha256},
                        {"nvrtc_version", t.compile.nvrtc_version},
                        {"card", t.screen.device}};
  }
  return {{"schema_version", kSchemaVersion},
          {"device", "cuda"},
          {"op", std::string(op_name(o.screen.op))},
          {"rows", o.screen.rows_max},
          {"cols", o.screen.cols},
          {"utility", "implied bandwidth / measured copy bandwidth"},
          {"sanitizers_on_best", std::move(tools)},
          {"tried", std::move(ts)},
          {"best", std::move(best)}};
}

}  // namespace plumb::kernels::cuda
