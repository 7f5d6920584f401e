#include "launch/port.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace plumb::launch {
namespace {

// Inodes of LISTEN (state 0A) sockets on `port` in one /proc/net/tcp-format file.
void scan_tcp_file(const char* path, uint16_t port, std::set<uint64_t>& inodes) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, tmo;
    uint64_t inode = 0;
    if (!(ls >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> tmo >> inode)) continue;
    if (state != "0A") continue;
    size_t colon = local.rfind(':');
    if (colon == std::string::npos) continue;
    unsigned long p = std::strtoul(local.c_str() + colon + 1, nullptr, 16);
    if (p == port && inode != 0) inodes.insert(inode);
  }
}

pid_t read_pgid(pid_t pid) {
  pid_t g = ::getpgid(pid);
  return g < 0 ? -1 : g;
}

}  // namespace

std::string process_cmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s;
}

Result<std::vector<PortListener>> port_listeners(uint16_t port) {
  std::set<uint64_t> inodes;
  {
    std::ifstream probe("/proc/net/tcp");
    if (!probe) return io_error("cannot read /proc/net/tcp (not Linux, or /proc not mounted)");
  }
  scan_tcp_file("/proc/net/tcp", port, inodes);
  scan_tcp_file("/proc/net/tcp6", port, inodes);
  std::vector<PortListener> out;
  if (inodes.empty()) return out;
  std::set<uint64_t> found;
  DIR* proc = ::opendir("/proc");
  if (proc) {
    while (dirent* e = ::readdir(proc)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (*end != '\0' || pid <= 0) continue;
      std::string fd_dir = "/proc/" + std::string(e->d_name) + "/fd";
      DIR* fds = ::opendir(fd_dir.c_str());
      if (!fds) continue;  // not ours to read, or gone
      while (dirent* f = ::readdir(fds)) {
        if (f->d_name[0] == '.') continue;
        char target[128];
        std::string link = fd_dir + "/" + f->d_name;
        ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        unsigned long long ino = 0;
        if (std::sscanf(target, "socket:[%llu]", &ino) != 1) continue;
        if (!inodes.count(ino)) continue;
        PortListener l;
        l.inode = ino;
        l.pid = pid_t(pid);
        l.pgid = read_pgid(l.pid);
        l.cmdline = process_cmdline(l.pid);
        out.push_back(std::move(l));
        found.insert(ino);
      }
      ::closedir(fds);
    }
    ::closedir(proc);
  }
  for (uint64_t ino : inodes)
    if (!found.count(ino)) out.push_back(PortListener{ino, -1, -1, ""});
  return out;
}

Result<uint16_t> pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return io_error("socket() failed while picking a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return io_error("bind(127.0.0.1:0) failed while picking a free port");
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return uint16_t(ntohs(addr.sin_port));
}

}  // namespace plumb::launch
