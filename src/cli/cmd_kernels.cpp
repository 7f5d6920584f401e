// `plumb kernels list|profile|tasks|search|screen|accept`: the deployment-aware kernel loop
// (docs/architecture.md, idea 3; docs/kernels.md). The logic lives in kernels/ (profile.h, task.h, screen.h,
// search.h, accept.h); this file parses flags and prints.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "cli/command.h"
#include "core/file.h"
#include "core/json.h"
#include "engine/cpu/kernels.h"
#include "kernels/accept.h"
#include "kernels/profile.h"
#include "kernels/screen.h"
#include "kernels/search.h"
#include "kernels/task.h"
#include "ledger/ledger.h"

namespace plumb::cli {
namespace {

struct KernelsArgs {
  kernels::ProfileOptions profile;
  std::string weights;  // "prefill=0.5,decode=0.5"
  bool json = false;
  std::string out;
  int top = 6;
  double min_share = 0.005;
  std::string task_dir;
  kernels::SearchOptions search;
  std::string proposer;
  std::string source;  // screen: a C++ file
  std::string so;      // screen-child
  int fd = -1;
  bool no_timing = false;
  bool naive = false;
  kernels::AcceptOptions accept;
};

int fail(const char* what, const Status& s) {
  std::cerr << "plumb kernels " << what << ": " << s.to_string() << "\n";
  return exit_for(s);
}

void progress(const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); }

std::string self_exe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

Status parse_weights(const std::string& text, std::array<double, 2>* w) {
  if (text.empty()) return Status::Ok();
  double pre = -1, dec = -1;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t eq = item.find('=');
    if (eq == std::string::npos)
      return invalid_argument("--weights: expected prefill=W,decode=W, got '" + text + "'");
    std::string key = item.substr(0, eq);
    double v = 0;
    try {
      v = std::stod(item.substr(eq + 1));
    } catch (...) {
      return invalid_argument("--weights: '" + item + "' is not key=number");
    }
    if (v < 0) return invalid_argument("--weights: weights must be >= 0");
    if (key == "prefill") {
      pre = v;
    } else if (key == "decode") {
      dec = v;
    } else {
      return invalid_argument("--weights: unknown phase '" + key + "' (prefill, decode)");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (pre < 0 || dec < 0) return invalid_argument("--weights needs both prefill= and decode=");
  if (pre + dec <= 0) return invalid_argument("--weights: at least one weight must be > 0");
  (*w)[0] = pre / (pre + dec);
  (*w)[1] = dec / (pre + dec);
  return Status::Ok();
}

int run_list() {
  auto& reg = engine::KernelRegistry::instance();
  for (int i = 0; i < int(engine::Op::kCount); ++i) {
    const engine::Op op = engine::Op(i);
    std::printf("%s (auto: prefill %s, decode %s)\n", engine::op_name(op),
                reg.best(op, engine::Phase::kPrefill)->name.c_str(),
                reg.best(op, engine::Phase::kDecode)->name.c_str());
    for (const auto* v : reg.list(op)) {
      const bool ok = !v->supported || v->supported();
      std::printf("  %-14s %s%s\n", v->name.c_str(), v->description.c_str(),
                  ok ? "" : " [not supported on this CPU]");
    }
  }
  return kExitOk;
}

int run_profile(KernelsArgs& a, bool tasks) {
  Status st = parse_weights(a.weights, &a.profile.weights);
  if (!st.ok()) return fail(tasks ? "tasks" : "profile", st);
  a.profile.capture = tasks;
  a.profile.progress = progress;
  auto r = kernels::run_profile(a.profile);
  if (!r.ok()) return fail(tasks ? "tasks" : "profile", r.status());
  if (!tasks) {
    if (a.json) {
      std::cout << kernels::profile_json(*r);
    } else {
      std::cout << kernels::format_profile(*r);
    }
    if (!a.out.empty()) {
      Status w = write_file_atomic(a.out, kernels::profile_json(*r));
      if (!w.ok()) return fail("profile", w);
    }
    return kExitOk;
  }
  if (a.out.empty()) return fail("tasks", invalid_argument("--out DIR is required"));
  auto dirs = kernels::write_tasks(*r, a.out, a.top, a.min_share);
  if (!dirs.ok()) return fail("tasks", dirs.status());
  Status w = write_file_atomic(a.out + "/profile.json", kernels::profile_json(*r));
  if (!w.ok()) return fail("tasks", w);
  std::cout << fmt::format("{} task folders in {} (profile.json alongside):\n", dirs->size(), a.out);
  for (const auto& d : *dirs) {
    auto t = kernels::load_task(d);
    if (!t.ok()) return fail("tasks", t.status());
    std::cout << fmt::format("  {:<40} {} {} rows {}..{} n={} k={} {} baseline {} ({:.1f}% of e2e)\n", d,
                             engine::op_name(t->op), engine::phase_name(t->phase), t->m_min, t->m_max, t->n,
                             t->k, engine::dtype_name(t->dtype), t->baseline_variant, 100 * t->share);
  }
  std::cout << "next: plumb kernels search --task <folder> --out <search folder>\n";
  return kExitOk;
}

int run_search(KernelsArgs& a) {
  auto t = kernels::load_task(a.task_dir);
  if (!t.ok()) return fail("search", t.status());
  if (a.search.out_dir.empty()) a.search.out_dir = a.task_dir + "/search";
  if (!a.proposer.empty()) a.search.proposer_argv = {"/bin/sh", "-c", a.proposer};
  a.search.progress = progress;
  a.search.screen.plumb_binary = self_exe();
  if (a.no_timing) a.search.screen.timing = false;
  auto r = kernels::run_search(*t, a.search);
  if (!r.ok()) return fail("search", r.status());
  if (a.json) {
    std::cout << kernels::search_json(*t, *r);
  } else if (r->best >= 0) {
    const auto& b = r->tried[size_t(r->best)];
    std::cout << fmt::format(
        "best: {} (family {}), u = {:.3f} over {} ({:.0f} ns vs {:.0f} ns warm){}; library {}\n",
        b.candidate.name, b.candidate.family, b.score(), b.result.baseline, b.result.warm_ns,
        b.result.base_warm_ns,
        b.confirmed_utility >= 0 ? fmt::format(", the lower of two timings ({:.3f}, {:.3f})",
                                               b.result.utility, b.confirmed_utility)
                                 : "",
        b.result.so_path);
    std::cout << "results: " << a.search.out_dir << "/search.json; next: plumb kernels accept --search "
              << a.search.out_dir << "\n";
  } else {
    std::cout << "no candidate passed screening; see " << a.search.out_dir << "/search.json\n";
  }
  return kExitOk;
}

int run_screen(KernelsArgs& a) {
  auto t = kernels::load_task(a.task_dir);
  if (!t.ok()) return fail("screen", t.status());
  auto src = read_file(a.source);
  if (!src.ok()) return fail("screen", src.status());
  kernels::Candidate c;
  c.name = std::filesystem::path(a.source).stem().string();
  c.family = "file";
  c.origin = "file";
  c.source = *src;
  kernels::ScreenOptions o = a.search.screen;
  o.plumb_binary = self_exe();
  o.guard_pages = !a.naive;
  if (a.no_timing) o.timing = false;
  const std::string work = a.out.empty() ? a.task_dir + "/screen" : a.out;
  auto r = kernels::screen_candidate(*t, c, work, o);
  if (a.json) {
    std::cout << kernels::screen_result_json_text(r) << "\n";
  } else {
    std::cout << fmt::format("{}: {}{} — {}\n", c.name, r.verdict,
                             r.signature.empty() ? "" : " (" + r.signature + ")", r.detail);
    if (r.passed() && o.timing) {
      std::cout << fmt::format("u = {:.3f}: {:.0f} ns vs {} {:.0f} ns warm; cold {:.0f} vs {:.0f} ns\n",
                               r.utility, r.warm_ns, r.baseline, r.base_warm_ns, r.cold_ns, r.base_cold_ns);
    }
  }
  return r.passed() ? kExitOk : kExitFailed;
}

int run_accept(KernelsArgs& a) {
  a.accept.plumb_binary = self_exe();
  a.accept.progress = progress;
  auto r = kernels::run_accept(a.accept);
  if (!r.ok()) return fail("accept", r.status());
  bool any = false;
  json::array arr;
  for (const auto& o : *r) {
    any |= o.accepted;
    if (!a.json) {
      std::cout << fmt::format(
          "{} patches on scenario {}: comparison {}, readout {}: objective ratio {:.4f} [{:.4f}, {:.4f}], "
          "ell(c) = {:.4f} [{:.4f}, {:.4f}], verdict {} -> {}\n",
          o.phase, o.scenario, o.registration_id, o.readout_id, o.ratio, o.ratio_lo, o.ratio_hi, o.ell,
          o.ell_lo, o.ell_hi, o.verdict, o.accepted ? "ACCEPTED" : "not accepted");
      std::cout << o.readout_text << "\n";
    }
    json::array patches;
    for (const auto& p : o.patches) {
      patches.push_back(json::object{{"name", p.name},
                                     {"op", engine::op_name(p.op)},
                                     {"phase", engine::phase_name(p.phase)},
                                     {"module", p.module},
                                     {"utility", p.utility},
                                     {"so_path", p.so_path}});
    }
    arr.push_back(json::object{{"phase", o.phase},
                               {"scenario", o.scenario},
                               {"registration_id", o.registration_id},
                               {"readout_id", o.readout_id},
                               {"ratio", o.ratio},
                               {"ratio_ci", json::array{o.ratio_lo, o.ratio_hi}},
                               {"ell", o.ell},
                               {"ell_ci", json::array{o.ell_lo, o.ell_hi}},
                               {"verdict", o.verdict},
                               {"accepted", o.accepted},
                               {"patches", std::move(patches)}});
  }
  if (a.json) {
    std::cout << json::dump_pretty(json::object{{"schema_version", 1}, {"outcomes", std::move(arr)}}) << "\n";
  }
  if (any) {
    std::cerr << "accepted kernel configuration written to " << a.accept.kernels_out
              << " (use: plumb serve --kernels " << a.accept.kernels_out << ")\n";
  } else {
    std::cerr << "nothing accepted; " << a.accept.kernels_out << " not written\n";
  }
  return any ? kExitOk : kExitFailed;
}

using KernelsArgsPtr = std::shared_ptr<KernelsArgs>;

// `profile` and `tasks`: the workload run in process, the hotspot table or the task folders.
void add_profile_commands(CLI::App* c, const KernelsArgsPtr& a) {
  auto add_profile_flags = [a](CLI::App* s) {
    s->add_option("--workload", a->profile.workload,
                  "scenario A|B|C|D (drawn from --seed as plumb compare does) or a request-set JSONL file")
        ->capture_default_str();
    s->add_option("--size", a->profile.size, "scenario size class: small | gpu")->capture_default_str();
    s->add_option(
        "--model", a->profile.model_dir,
        "model folder (config.json, safetensors, tokenizer.json; default: the shipped models/plumb-tiny, "
        "found as plumb serve finds it)");
    s->add_option("--seed", a->profile.seed, "request-set seed")->capture_default_str();
    s->add_option("--requests", a->profile.max_requests, "run only the first N requests (0 = all)")
        ->capture_default_str();
    s->add_option("--concurrency", a->profile.concurrency, "requests in flight (0 = the scenario's)")
        ->capture_default_str();
    s->add_option("--threads", a->profile.threads, "kernel threads (0 = all cores)")->capture_default_str();
    s->add_option("--kernels", a->profile.kernels, "auto | reference | a kernel selection JSON file")
        ->capture_default_str();
    s->add_option("--weights", a->weights,
                  "phase weights prefill=W,decode=W for s(m) (default: measured time shares)");
  };
  auto* pr = c->add_subcommand("profile", "Run the workload in process and print the hotspot table");
  add_profile_flags(pr);
  pr->add_flag("--json", a->json, "print JSON (schema_version 1) instead of the table");
  pr->add_option("--out", a->out, "also write the JSON here");
  pr->callback([a] { set_exit_code(run_profile(*a, false)); });

  auto* tk = c->add_subcommand(
      "tasks", "Profile with input capture and write one task folder per hot module and phase");
  add_profile_flags(tk);
  tk->add_option("--out", a->out, "folder for the task folders")->required();
  tk->add_option("--top", a->top,
                 "the N hottest (module, phase) pairs with a plugin op (matmul, rmsnorm, rope, swiglu, "
                 "sampling)")
      ->capture_default_str();
  tk->add_option("--min-share", a->min_share, "skip modules below this share of end-to-end time")
      ->capture_default_str();
  tk->callback([a] { set_exit_code(run_profile(*a, true)); });
}

// `search`, `screen` and the internal `screen-child`.
void add_search_commands(CLI::App* c, const KernelsArgsPtr& a) {
  auto add_screen_flags = [a](CLI::App* s) {
    s->add_option("--draws", a->search.screen.draws, "fresh random draws over the task's shape range")
        ->capture_default_str();
    s->add_option("--threads", a->search.screen.threads, "timing thread pool (0 = all cores, as the engine)")
        ->capture_default_str();
    s->add_flag("--asan", a->search.screen.asan,
                "compile with AddressSanitizer and run the child with libasan");
    s->add_flag("--no-timing", a->no_timing, "correctness and safety only");
    s->add_option("--cxx", a->search.screen.cxx, "compiler")->capture_default_str();
  };
  auto* se =
      c->add_subcommand("search", "Episodes of built-in and proposed candidates over one task, screened");
  se->add_option("--task", a->task_dir, "a task folder from plumb kernels tasks")->required();
  se->add_option("--out", a->search.out_dir, "results folder (default <task>/search)");
  se->add_option("--episodes", a->search.episodes, "episodes")->capture_default_str();
  se->add_option("--candidates", a->search.candidates_per_episode, "built-in candidates per episode")
      ->capture_default_str();
  se->add_option("--proposer", a->proposer,
                 "external proposer command (run by /bin/sh): JSON context on stdin, prints "
                 "{\"name\",\"source\",\"rationale\"}");
  se->add_option("--proposals", a->search.proposals_per_episode, "proposer calls per episode")
      ->capture_default_str();
  se->add_option("--confirm", a->search.confirm,
                 "the N best by u are screened and timed again at the end; the best is the highest lower "
                 "u of the two (0 = off)")
      ->capture_default_str();
  se->add_flag("--json", a->json, "print search.json");
  add_screen_flags(se);
  se->callback([a] { set_exit_code(run_search(*a)); });

  auto* sc =
      c->add_subcommand("screen", "Screen one C++ source (plugin ABI) against a task; exit 0 iff it passes");
  sc->add_option("--task", a->task_dir, "a task folder")->required();
  sc->add_option("--source", a->source, "the candidate's C++ source")->required();
  sc->add_option("--out", a->out, "work folder (default <task>/screen)");
  sc->add_flag("--naive", a->naive, "no guard pages: the naive isolated check (to see what guard pages add)");
  sc->add_flag("--json", a->json, "print the verdict as JSON");
  add_screen_flags(sc);
  sc->callback([a] { set_exit_code(run_screen(*a)); });

  auto* ch = c->add_subcommand("screen-child", "(internal) the screening child, exec'd for --asan");
  ch->group("");
  ch->add_option("--task", a->task_dir)->required();
  ch->add_option("--so", a->so)->required();
  ch->add_option("--fd", a->fd)->required();
  ch->add_option("--draws", a->search.screen.draws);
  ch->add_option("--seed", a->search.screen.seed);
  ch->add_flag("--no-timing", a->no_timing);
  ch->callback([a] {
    kernels::ScreenOptions o = a->search.screen;
    o.timing = !a->no_timing;
    set_exit_code(kernels::screen_child_main(a->task_dir, a->so, o, a->fd));
  });
}

// `accept`: the in-model paired comparison of the best screened candidates.
void add_accept_command(CLI::App* c, const KernelsArgsPtr& a) {
  auto* ac =
      c->add_subcommand("accept",
                        "Patch the best screened candidates into a kernel configuration and accept them only "
                        "if the pre-registered paired comparison reads `better`");
  ac->add_option("--search", a->accept.search_dirs, "search folders (search.json)")->required();
  ac->add_option("--ledger", a->accept.ledger_path, "SQLite ledger")
      ->default_val(std::string(ledger::kDefaultPath));
  ac->add_option("--out", a->accept.kernels_out, "accepted kernel configuration (written only on `better`)")
      ->required();
  ac->add_option("--base", a->accept.base_kernels,
                 "kernel configuration to patch (default: auto everywhere)");
  ac->add_option("--scenario", a->accept.scenario,
                 "scenario (default: B for decode patches, A for prefill; D for --joint over both)");
  ac->add_option("--size", a->accept.size, "size class")->capture_default_str();
  ac->add_option("--pairs", a->accept.pairs, "pairs (>= 5)")->capture_default_str();
  ac->add_option("--min-effect", a->accept.min_effect, "better: CI of the ratio above 1 + min_effect")
      ->capture_default_str();
  ac->add_option("--delta", a->accept.delta, "equivalence margin")->capture_default_str();
  ac->add_option("--seed", a->accept.seed, "base seed of the pairs")->capture_default_str();
  ac->add_option("--min-utility", a->accept.min_utility, "patch only candidates with u above this")
      ->capture_default_str();
  ac->add_option("--model", a->accept.model_dir, "model folder for both arms (default models/plumb-tiny)");
  ac->add_option("--work-dir", a->accept.work_dir, "arm configs and engine logs (default kernels-accept/)");
  ac->add_option("--threads", a->accept.threads, "engine threads of both arms (0 = default)");
  ac->add_flag("--joint", a->accept.joint,
               "one comparison of every patch together (both phases) instead of one per phase; scenario "
               "default D when the patches span both phases");
  ac->add_flag("--json", a->json, "print the outcomes as JSON");
  ac->callback([a] { set_exit_code(run_accept(*a)); });
}

void setup_kernels(CLI::App& root) {
  auto a = std::make_shared<KernelsArgs>();
  auto* c = root.add_subcommand(
      "kernels",
      "Deployment-aware kernel optimization: profile the real workload per module and phase, extract tasks, "
      "search and screen candidates (correctness, guard pages, crash isolation, warm/cold timing), accept "
      "only "
      "through the in-model paired comparison");
  c->footer(
      "\nThe loop (docs/kernels.md):\n"
      "  plumb kernels profile --workload B                 # hotspot table: s(m), phase weights, e2e "
      "shares\n"
      "  plumb kernels tasks --workload B --out tasks/      # one folder per hot module and phase\n"
      "  plumb kernels search --task tasks/<m>.decode --out s1/   # episodes of candidates, screened\n"
      "  plumb kernels accept --search s1/ --ledger plumb.db --out kernels.json   # paired, in-model\n"
      "  plumb serve --kernels kernels.json\n");
  c->require_subcommand(1);

  auto* ls = c->add_subcommand("list", "Every kernel op with its variants and what auto picks per phase");
  ls->callback([] { set_exit_code(run_list()); });
  add_profile_commands(c, a);
  add_search_commands(c, a);
  add_accept_command(c, a);
}

}  // namespace

PLUMB_COMMAND(55, setup_kernels);

}  // namespace plumb::cli
