#include "net/http_types.h"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

namespace plumb::net {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view find_header(const Headers& headers, std::string_view name) {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

std::string_view status_reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string json_error_body(int status, std::string_view message, std::string_view type) {
  boost::json::object err;
  err["message"] = message;
  err["type"] = type;
  err["code"] = status;
  boost::json::object root;
  root["error"] = std::move(err);
  return boost::json::serialize(root);
}

bool LogThrottle::allow(std::chrono::steady_clock::time_point now, uint64_t* suppressed) {
  if (any_ && now - last_ < interval_) {
    refused_++;
    return false;
  }
  any_ = true;
  last_ = now;
  if (suppressed) *suppressed = refused_;
  refused_ = 0;
  return true;
}

uint64_t LogThrottle::take_pending() {
  uint64_t n = refused_;
  refused_ = 0;
  return n;
}

}  // namespace plumb::net
