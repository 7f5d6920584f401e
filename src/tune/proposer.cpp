#include "tune/proposer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

namespace plumb::tune {
namespace {

std::string tail(const std::string& s, size_t n = 800) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

std::string argv_text(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

class ExternalStrategy final : public Strategy {
 public:
  ExternalStrategy(SearchSpace sp, StrategyOptions o) : sp_(std::move(sp)), o_(std::move(o)) {}
  std::string name() const override { return "external"; }
  Result<std::optional<Proposal>> propose(const std::vector<Observation>& h,
                                          const BudgetLeft& left) override {
    std::string input = json::dump(proposer_context(sp_, h, left, o_.context_extra));
    auto out = run_with_stdin(o_.proposer_argv, input, o_.proposer_timeout);
    if (!out.ok())
      return out.status().with_context("external proposer '" + argv_text(o_.proposer_argv) + "'");
    auto p = parse_proposal(sp_, *out);
    if (!p.ok())
      return p.status().with_context("external proposer '" + argv_text(o_.proposer_argv) +
                                     "' printed an unusable proposal");
    return p;
  }

 private:
  SearchSpace sp_;
  StrategyOptions o_;
};

}  // namespace

json::object proposer_context(const SearchSpace& sp, const std::vector<Observation>& h,
                              const BudgetLeft& left, const json::object& extra) {
  json::array hist, notes;
  for (const auto& o : h) {
    json::object e{{"index", o.index},
                   {"stage", o.stage},
                   {"config", config_to_json(o.config)},
                   {"feasible", o.feasible},
                   {"objective", o.objective && std::isfinite(*o.objective) ? json::value(*o.objective)
                                                                            : json::value(nullptr)},
                   {"status", o.status},
                   {"failure", o.failure},
                   {"metrics", o.metrics}};
    hist.push_back(std::move(e));
    if (!o.notes.empty()) notes.emplace_back(o.notes);
  }
  json::object ctx{{"schema_version", kProposerSchemaVersion},
                   {"space", space_to_json(sp)},
                   {"history", hist},
                   {"budget_left", json::object{{"trials", left.trials}, {"seconds", left.seconds}}},
                   {"notes", notes}};
  for (const auto& [k, v] : extra) ctx[k] = v;
  return ctx;
}

namespace {

// A started child in its own process group with its stdin, stdout and stderr on pipes (ours non-blocking).
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;  // our ends
};

// Forks and execs argv; NotFound (with the reason) when it cannot be started.
Result<Child> start_child(const std::vector<std::string>& argv) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0)
    return io_error(std::string("pipe: ") + std::strerror(errno));
  int exec_err[2];
  if (pipe2(exec_err, O_CLOEXEC) != 0) return io_error(std::string("pipe: ") + std::strerror(errno));
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return io_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execvp(cargv[0], cargv.data());
    int e = errno;
    [[maybe_unused]] auto n = write(exec_err[1], &e, sizeof e);
    _exit(127);
  }
  setpgid(pid, pid);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  close(exec_err[1]);
  int e = 0;
  if (read(exec_err[0], &e, sizeof e) == sizeof e) {
    close(exec_err[0]);
    close(in[1]);
    close(out[0]);
    close(err[0]);
    waitpid(pid, nullptr, 0);
    return not_found("cannot start '" + argv[0] + "': " + std::strerror(e) +
                     " (give a program path or a command on PATH)");
  }
  close(exec_err[0]);
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  return Child{pid, in[1], out[0], err[0]};
}

// What the child wrote, and whether the deadline passed before its output closed.
struct Exchange {
  std::string out, err;
  bool timed_out = false;
};

// Reads one non-blocking fd into s; false once it is closed or failed.
bool drain(int fd, std::string& s) {
  char buf[4096];
  ssize_t k = read(fd, buf, sizeof buf);
  if (k > 0) {
    s.append(buf, size_t(k));
    return true;
  }
  return !(k == 0 || errno != EAGAIN);
}

// Writes input to the child's stdin while reading its stdout and stderr, until both close or the
// deadline passes; stdout stops at 16 MiB, stderr keeps its tail. Closes the child's pipes.
Exchange exchange(Child& c, const std::string& input, std::chrono::steady_clock::time_point deadline) {
  Exchange x;
  size_t written = 0;
  int fin = c.in;
  if (input.empty()) {
    close(fin);
    fin = -1;
  }
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      x.timed_out = true;
      break;
    }
    pollfd fds[3];
    int n = 0;
    int io = -1, ie = -1, ii = -1;
    if (out_open) {
      fds[n] = {c.out, POLLIN, 0};
      io = n++;
    }
    if (err_open) {
      fds[n] = {c.err, POLLIN, 0};
      ie = n++;
    }
    if (fin >= 0) {
      fds[n] = {fin, POLLOUT, 0};
      ii = n++;
    }
    int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    int r = poll(fds, nfds_t(n), ms);
    if (r < 0 && errno != EINTR) break;
    if (io >= 0 && (fds[io].revents & (POLLIN | POLLHUP | POLLERR))) {
      out_open = drain(c.out, x.out);
      if (x.out.size() > (16u << 20)) break;
    }
    if (ie >= 0 && (fds[ie].revents & (POLLIN | POLLHUP | POLLERR))) {
      err_open = drain(c.err, x.err);
      if (x.err.size() > (1u << 20)) x.err.erase(0, x.err.size() - (64u << 10));
    }
    if (ii >= 0 && (fds[ii].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t k = write(fin, input.data() + written, input.size() - written);
      if (k > 0) written += size_t(k);
      if ((k < 0 && errno != EAGAIN) || written == input.size()) {
        close(fin);
        fin = -1;
      }
    }
  }
  if (fin >= 0) close(fin);
  close(c.out);
  close(c.err);
  return x;
}

// Waits for the child's exit, still bounded by the deadline; kills what it left in its group.
// Timeout, or FailedPrecondition for a signal or a non-zero exit (with stderr's tail).
Status wait_child(const Child& c, std::chrono::steady_clock::time_point deadline,
                  std::chrono::milliseconds timeout, const std::string& serr) {
  int status = 0;
  while (true) {
    pid_t w = waitpid(c.pid, &status, WNOHANG);
    if (w == c.pid) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      return Status(Code::kTimeout, "closed its output but did not exit within " +
                                        std::to_string(timeout.count()) + " ms (killed)");
    }
    usleep(2000);
  }
  ::kill(-c.pid, SIGKILL);  // anything it left behind in its group
  if (WIFSIGNALED(status))
    return failed_precondition("was killed by signal " + std::to_string(WTERMSIG(status)) +
                               (serr.empty() ? "" : "; stderr: " + tail(serr)));
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return failed_precondition("exited with code " + std::to_string(WEXITSTATUS(status)) +
                               (serr.empty() ? "" : "; stderr: " + tail(serr)));
  return Status::Ok();
}

}  // namespace

Result<std::string> run_with_stdin(const std::vector<std::string>& argv, const std::string& input,
                                   std::chrono::milliseconds timeout) {
  if (argv.empty()) return invalid_argument("no program given");
  PLUMB_ASSIGN_OR_RETURN(Child c, start_child(argv));
  ::signal(SIGPIPE, SIG_IGN);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Exchange x = exchange(c, input, deadline);
  if (x.timed_out) {
    int status = 0;
    ::kill(-c.pid, SIGKILL);
    waitpid(c.pid, &status, 0);
    return Status(Code::kTimeout, "did not answer within " + std::to_string(timeout.count()) +
                                      " ms (killed; raise --proposer-timeout or make it faster)" +
                                      (x.err.empty() ? "" : "; stderr: " + tail(x.err)));
  }
  PLUMB_RETURN_IF_ERROR(wait_child(c, deadline, timeout, x.err));
  return std::move(x.out);
}

Result<std::optional<Proposal>> parse_proposal(const SearchSpace& sp, const std::string& text) {
  std::string t = text;
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
  if (t.empty())
    return invalid_argument(
        "stdout is empty; print one JSON object {\"config\": {...}, \"rationale\": \"...\"}");
  auto o = json::parse_object(t);
  if (!o.ok())
    return invalid_argument("stdout is not one JSON object (" + o.status().message() +
                            "); it began: " + t.substr(0, 120));
  std::string rationale;
  if (auto* r = o->if_contains("rationale")) {
    if (!r->is_string()) return invalid_argument("\"rationale\" must be a string");
    rationale = std::string(r->as_string());
  }
  if (auto* s = o->if_contains("stop"); s && s->is_bool() && s->as_bool()) return std::optional<Proposal>();
  auto* c = o->if_contains("config");
  if (!c || !c->is_object())
    return invalid_argument("the proposal has no \"config\" object (or {\"stop\": true} to end the search)");
  Proposal p;
  auto cfg = config_from_json(sp, c->as_object());
  if (!cfg.ok()) return invalid_argument(cfg.status().message());
  p.config = std::move(cfg).value();
  p.rationale = rationale.empty() ? "(no rationale given)" : rationale;
  if (auto* n = o->if_contains("notes")) {
    if (!n->is_string()) return invalid_argument("\"notes\" must be a string");
    p.notes = std::string(n->as_string());
  }
  if (auto* st = o->if_contains("stage")) {
    if (!st->is_string() || (st->as_string() != "full" && st->as_string() != "screen"))
      return invalid_argument("\"stage\" must be \"full\" or \"screen\"");
    p.stage = std::string(st->as_string());
  }
  return std::optional<Proposal>(std::move(p));
}

Result<std::unique_ptr<Strategy>> make_external_strategy(const SearchSpace& sp, const StrategyOptions& o) {
  if (o.proposer_argv.empty() || o.proposer_argv[0].empty())
    return invalid_argument("the external strategy needs a program: --proposer 'python3 my_agent.py'");
  if (o.proposer_timeout.count() <= 0) return invalid_argument("--proposer-timeout must be > 0");
  return std::unique_ptr<Strategy>(std::make_unique<ExternalStrategy>(sp, o));
}

}  // namespace plumb::tune
