// The controller lock: one controller at a time on a job journal (executor/journal.h). A second
// `plumb tune|evaluate|compare run|kernels search --executor` started on the journal of a live one would
// submit every job twice; it is refused at once, with the other controller's pid and host.
//
// The lock is the file `<journal>.lock`, held with flock(2) for the controller's lifetime and naming
// its holder: {"schema_version":1,"pid":P,"host":H,"started":UTC,"command":C}. The kernel releases a
// flock when its process dies, SIGKILL included, so a restarted controller takes over the lock of a
// killed one without help. The holder touches the file every kHeartbeat (its modification time is
// the heartbeat).
//
// Who holds it, as a starting controller decides:
//   - flock refused: a live process holds it (on NFS, possibly on another client): refused.
//   - flock granted and the file names this host, or no one: the holder is gone: taken over.
//   - flock granted and the file names another host: a file system whose flock does not reach across
//     hosts (NFS mounted with `nolock`) cannot tell a live controller there from a dead one; the
//     heartbeat decides: refused while it is younger than kStaleAfter, taken over after that.
//   - flock not supported by the file system (ENOLCK, EOPNOTSUPP): the file alone decides: this
//     host's pid alive (kill(pid, 0)) refused, gone taken over; another host by the heartbeat as above.
// docs/cluster.md ("One controller per journal") says the same for users.
//
// Thread-safety: a ControllerLock runs one heartbeat thread of its own; the object itself is used by
// one thread. Errors: FailedPrecondition (held by another controller), IoError (the file).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/json.h"
#include "core/status.h"

namespace plumb::executor {

inline constexpr std::chrono::seconds kHeartbeat{60};
inline constexpr std::chrono::seconds kStaleAfter{600};

// What a starting controller finds in the lock (see the list above).
struct LockFinding {
  bool flock_supported = true;  // false: the file system refused flock(2) itself
  bool flock_granted = false;   // with flock_supported: this process got it
  json::object holder;          // the file's content; empty when none or unreadable
  std::chrono::seconds age{0};  // since the holder's last heartbeat (the file's modification time)
};
// "" when the lock may be taken; otherwise why not, naming the holder (pid, host, heartbeat age).
std::string lock_refusal(const LockFinding& f, const std::string& this_host);

class ControllerLock {
 public:
  // Takes the lock of `journal` for `command` (e.g. "plumb evaluate"). FailedPrecondition naming the
  // holder and `remedy` when another controller holds it.
  static Result<std::unique_ptr<ControllerLock>> acquire(const std::string& journal,
                                                         const std::string& command,
                                                         const std::string& remedy);
  ~ControllerLock();  // stops the heartbeat, empties the file and releases the lock
  ControllerLock(const ControllerLock&) = delete;
  ControllerLock& operator=(const ControllerLock&) = delete;

  const std::string& path() const { return path_; }
  // Whose lock this one took over ("pid P on host H": a controller that died holding it), or "" when
  // the lock was free.
  const std::string& took_over() const { return took_over_; }

 private:
  ControllerLock(std::string path, int fd, std::string took_over);
  void heartbeat();
  std::string path_;
  int fd_;
  std::string took_over_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread beat_;
};

// Whether `s` is acquire()'s refusal (another controller holds the lock), as opposed to a failure of
// this controller's own work: a caller that would otherwise suggest a resume says only the refusal.
bool held_by_another(const Status& s);

// This machine's host name, as the lock records it.
std::string this_host();

}  // namespace plumb::executor
