// Black-box helpers: start the real `plumb serve` on a free port and talk HTTP/1.1 to it over raw
// sockets (a deliberately independent client, so a bug in net/ cannot hide one in the server).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/json.h"
#include "core/subprocess.h"

namespace plumb::testing {

struct HttpReply {
  int status = 0;
  std::string headers;  // raw head
  std::string body;     // de-chunked
};

inline int connect_to(uint16_t port) {
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

inline void send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += size_t(n);
  }
}

inline std::string request_text(const std::string& method, const std::string& path, const std::string& body) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!body.empty() || method == "POST") {
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return r + "\r\n" + body;
}

inline std::string dechunk(const std::string& raw) {
  std::string out;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) break;
    size_t n = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out += raw.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

inline HttpReply parse_reply(const std::string& raw) {
  HttpReply r;
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return r;
  r.headers = raw.substr(0, head_end);
  if (r.headers.size() > 12) r.status = std::atoi(r.headers.c_str() + 9);
  std::string body = raw.substr(head_end + 4);
  std::string lower = r.headers;
  for (auto& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  r.body = lower.find("transfer-encoding: chunked") != std::string::npos ? dechunk(body) : body;
  return r;
}

// One request on a fresh connection; reads until the server closes.
inline HttpReply http(uint16_t port, const std::string& method, const std::string& path,
                      const std::string& body = "") {
  int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, request_text(method, path, body));
  std::string raw;
  char buf[65536];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
  }
  ::close(fd);
  return parse_reply(raw);
}

// The "data:" payloads of an SSE body, in order.
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
  }
  return out;
}

inline json::object obj(const std::string& text) {
  auto v = json::parse_object(text);
  return v.ok() ? *v : json::object();
}

// The generated text of a completion or chat completion reply (non-streamed).
inline std::string text_of(const HttpReply& r) {
  auto o = obj(r.body);
  if (!o.contains("choices")) return "<no choices: " + r.body + ">";
  const auto& c = o.at("choices").as_array().at(0).as_object();
  if (c.contains("message")) return std::string(c.at("message").as_object().at("content").as_string());
  return std::string(c.at("text").as_string());
}

// A running `plumb serve`.
class ServeProcess {
 public:
  // Starts plumb serve with `args` (plus --port 0) and waits for the ready line. `nofile` > 0 runs
  // it under that soft file-descriptor limit (through sh's ulimit).
  bool start(std::vector<std::string> args, std::string* error, int nofile = 0) {
    static int counter = 0;
    out_path_ = (std::filesystem::temp_directory_path() / ("plumb_serve_test_" + std::to_string(::getpid()) +
                                                           "_" + std::to_string(counter++) + ".log"))
                    .string();
    SpawnOptions o;
    o.argv = {PLUMB_BINARY, "--log-level", "warn", "serve", "--port", "0"};
    for (auto& a : args) o.argv.push_back(a);
    if (nofile > 0) {
      o.argv.insert(o.argv.begin(),
                    {"/bin/sh", "-c", "ulimit -n " + std::to_string(nofile) + " && exec \"$0\" \"$@\""});
    }
    o.stdout_path = out_path_;
    o.stderr_path = "=stdout";
    auto p = Subprocess::spawn(o);
    if (!p.ok()) {
      *error = p.status().to_string();
      return false;
    }
    proc_ = std::move(p).value();
    std::regex ready(R"(plumb serve: listening on http://[^:]+:(\d+))");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      std::string log = output();
      std::smatch m;
      if (std::regex_search(log, m, ready)) {
        port_ = uint16_t(std::stoi(m[1]));
        return true;
      }
      if (!proc_.running()) {
        *error = "plumb serve exited: " + log;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    *error = "plumb serve did not become ready: " + output();
    return false;
  }
  std::string output() const {
    std::ifstream f(out_path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  uint16_t port() const { return port_; }
  Subprocess& process() { return proc_; }
  ~ServeProcess() {
    if (proc_.pid() > 0) proc_.stop(std::chrono::milliseconds(5000));
    if (!out_path_.empty()) std::filesystem::remove(out_path_);
  }

 private:
  Subprocess proc_;
  std::string out_path_;
  uint16_t port_ = 0;
};

// A metric's value from /metrics text (first line starting with `name{` or `name `), or -1.
inline double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return -1;
}

// Polls /metrics until nothing runs or waits and no KV block is in use (or `bound` passes);
// returns the last page.
inline std::string wait_until_idle(uint16_t port, std::chrono::seconds bound = std::chrono::seconds(60)) {
  std::string m;
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    m = http(port, "GET", "/metrics").body;
    if (metric(m, "plumb:num_requests_running") == 0 && metric(m, "plumb:num_requests_waiting") == 0 &&
        metric(m, "plumb:kv_cache_usage_perc") == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return m;
}

}  // namespace plumb::testing
