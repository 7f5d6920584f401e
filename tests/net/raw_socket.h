// Plain POSIX sockets for net/ tests: a raw client that sends exact bytes, and a one-connection-
// at-a-time scripted server for client fault tests. Loopback only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace plumb::net::testing {

inline int connect_loopback(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Reads until EOF/error, or until `until` appears, or `limit` passes without data.
inline std::string recv_until(int fd, std::string_view until = {},
                              std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  std::string out;
  char buf[16384];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(limit.count())) <= 0) break;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (!until.empty() && out.find(until) != std::string::npos) break;
  }
  return out;
}

// Sends `request` on a new connection and returns everything the server sent until it closed.
inline std::string raw_exchange(uint16_t port, std::string_view request, bool shutdown_write = false) {
  int fd = connect_loopback(port);
  if (fd < 0) return "<connect failed>";
  send_all(fd, request);
  if (shutdown_write) ::shutdown(fd, SHUT_WR);
  std::string out = recv_until(fd);
  ::close(fd);
  return out;
}

// Closes with RST instead of FIN.
inline void close_with_reset(int fd) {
  linger l{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  ::close(fd);
}

// A listening socket on 127.0.0.1 whose accepted connections are handed to `script` one by one
// on a background thread. The script owns the fd and must close it (or return it to be closed).
class RawServer {
 public:
  explicit RawServer(std::function<void(int fd)> script) : script_(std::move(script)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listen_fd_, 64);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{listen_fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        int fd = ::accept(listen_fd_, nullptr, nullptr);
        if (fd < 0) continue;
        script_(fd);
      }
    });
  }
  ~RawServer() {
    stop_ = true;
    thread_.join();
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }

 private:
  std::function<void(int)> script_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Reads one request head (and a Content-Length body, if any) from fd.
inline std::string read_request(int fd) {
  std::string got = recv_until(fd, "\r\n\r\n");
  std::size_t end = got.find("\r\n\r\n");
  if (end == std::string::npos) return got;
  std::size_t cl = got.find("Content-Length: ");
  if (cl != std::string::npos && cl < end) {
    std::size_t n = std::stoul(got.substr(cl + 16));
    while (got.size() < end + 4 + n) {
      std::string more = recv_until(fd, {}, std::chrono::milliseconds(2000));
      if (more.empty()) break;
      got += more;
    }
  }
  return got;
}

// A free loopback port with nothing listening on it (bound, then closed).
inline uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace plumb::net::testing
