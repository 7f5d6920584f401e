// run_with_stdin: a program that reads one input on stdin and answers on stdout (the external
// proposers of `plumb tune` and `plumb kernels search --device cuda`), run with a deadline.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/subprocess.h"

namespace plumb {
namespace {

std::string tail(const std::string& s, size_t n = 800) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

}  // namespace

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
                                      " ms (killed: raise its timeout or make it faster)" +
                                      (x.err.empty() ? "" : "; stderr: " + tail(x.err)));
  }
  PLUMB_RETURN_IF_ERROR(wait_child(c, deadline, timeout, x.err));
  return std::move(x.out);
}

}  // namespace plumb
