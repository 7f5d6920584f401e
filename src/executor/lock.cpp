// The controller lock (lock.h): flock(2) on `<journal>.lock`, the holder named in the file, and a
// heartbeat for file systems whose locks do not reach across hosts.
#include "executor/lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>

#include "core/clock.h"

namespace plumb::executor {

std::string this_host() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

namespace {

std::string holder_text(const json::object& h) {
  if (h.empty()) return "a controller that has not yet written its name";
  auto pid = json::number_at(h, "pid");
  return json::string_at(h, "command").value_or("a controller") + " (pid " +
         (pid ? std::to_string(int64_t(*pid)) : std::string("?")) + " on host " +
         json::string_at(h, "host").value_or("?") + ", started " +
         json::string_at(h, "started").value_or("?") + ")";
}

constexpr const char* kHeldPrefix = "another controller is working on the job journal ";

bool pid_alive(int64_t pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

// Reads the lock file's content and the age of its modification time.
void read_holder(int fd, LockFinding& f) {
  struct stat st {};
  if (::fstat(fd, &st) == 0)
    f.age = std::chrono::seconds(std::max<int64_t>(0, int64_t(std::time(nullptr)) - int64_t(st.st_mtime)));
  std::string text;
  char buf[1024];
  for (off_t off = 0;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n <= 0) break;
    text.append(buf, size_t(n));
    off += n;
  }
  auto o = json::parse_object(text);
  if (o.ok()) f.holder = std::move(*o);
}

}  // namespace

std::string lock_refusal(const LockFinding& f, const std::string& here) {
  const std::string who = holder_text(f.holder);
  if (f.flock_supported && !f.flock_granted) return "held by " + who + ", which is running";
  const std::string host = json::string_at(f.holder, "host").value_or("");
  if (f.holder.empty() || host == here) {
    if (f.flock_supported) return "";  // granted here: its holder on this host is gone
    return pid_alive(int64_t(json::number_at(f.holder, "pid").value_or(0)))
               ? "held by " + who + ", which is running"
               : "";
  }
  if (f.age >= kStaleAfter) return "";
  return "held by " + who + ", whose last heartbeat was " + std::to_string(f.age.count()) +
         " s ago; this host cannot tell whether it still runs (the lock is taken over once its heartbeat "
         "is " +
         std::to_string(kStaleAfter.count()) +
         " s old; remove the lock file if you know that controller has ended)";
}

bool held_by_another(const Status& s) {
  return s.code() == Code::kFailedPrecondition && s.message().rfind(kHeldPrefix, 0) == 0;
}

Result<std::unique_ptr<ControllerLock>> ControllerLock::acquire(const std::string& journal,
                                                                const std::string& command,
                                                                const std::string& remedy) {
  const std::string path = journal + ".lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot open the controller lock " + path + ": " + std::strerror(errno));
  LockFinding f;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    f.flock_granted = true;
  } else if (errno == ENOLCK || errno == EOPNOTSUPP || errno == EINVAL) {
    f.flock_supported = false;
  } else if (errno != EWOULDBLOCK) {
    int e = errno;
    ::close(fd);
    return io_error("cannot lock the controller lock " + path + ": " + std::strerror(e));
  }
  read_holder(fd, f);
  const std::string here = this_host();
  if (std::string why = lock_refusal(f, here); !why.empty()) {
    ::close(fd);
    return failed_precondition(
        "another controller is working on the job journal " + journal + ": the lock " + path + " is " + why +
        ". Two controllers on one journal would submit every job " + "twice; " + remedy);
  }
  std::string took;
  if (auto pid = json::number_at(f.holder, "pid"); pid && int64_t(*pid) != int64_t(::getpid()))
    took = "pid " + std::to_string(int64_t(*pid)) + " on host " +
           json::string_at(f.holder, "host").value_or("?");
  const std::string me = json::dump(json::object{{"schema_version", 1},
                                                 {"pid", int64_t(::getpid())},
                                                 {"host", here},
                                                 {"started", utc_timestamp_now()},
                                                 {"command", command}}) +
                         "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != ssize_t(me.size())) {
    int e = errno;
    ::close(fd);
    return io_error("cannot write the controller lock " + path + ": " + std::strerror(e));
  }
  return std::unique_ptr<ControllerLock>(new ControllerLock(path, fd, std::move(took)));
}

ControllerLock::ControllerLock(std::string path, int fd, std::string took_over)
    : path_(std::move(path)), fd_(fd), took_over_(std::move(took_over)) {
  beat_ = std::thread([this] { heartbeat(); });
}

void ControllerLock::heartbeat() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!wake_.wait_for(lk, kHeartbeat, [this] { return stop_; })) ::futimens(fd_, nullptr);
}

ControllerLock::~ControllerLock() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  beat_.join();
  // Names no one now: a controller that ended cleanly leaves nothing for the next one to take over.
  if (::ftruncate(fd_, 0) != 0) {
    // The next controller finds this process gone and takes the lock over all the same.
  }
  ::close(fd_);
}

}  // namespace plumb::executor
