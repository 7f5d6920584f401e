// Who listens on a TCP port, from Linux /proc (net/tcp, net/tcp6 and /proc/<pid>/fd), and free
// ports for launches. Linux only.
//
// Thread-safety: stateless functions. Processes whose /proc/<pid>/fd this user cannot read (other
// users' processes) are invisible to port_listeners(); callers treat "no owner found" as unverified.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace plumb::launch {

struct PortListener {
  uint64_t inode = 0;   // socket inode of the listening socket
  pid_t pid = -1;       // a process holding it; -1 if no readable process holds it
  pid_t pgid = -1;      // that process's process group (-1 if unknown)
  std::string cmdline;  // its command line, arguments joined by spaces ("" if unknown)
};

// Listening TCP sockets (IPv4 and IPv6, any local address) on `port`, one entry per (socket,
// holder process). Empty when nothing listens. IoError if /proc/net/tcp cannot be read.
Result<std::vector<PortListener>> port_listeners(uint16_t port);

// A port that was free on 127.0.0.1 a moment ago (bind to port 0, read it back, close). Another
// process may take it before the caller binds it; launches check the port again.
Result<uint16_t> pick_free_port();

// /proc/<pid>/cmdline with NULs as spaces; "" if the process is gone.
std::string process_cmdline(pid_t pid);

}  // namespace plumb::launch
