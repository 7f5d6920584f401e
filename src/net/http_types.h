// Plain HTTP data types shared by the server and the client. No Boost in here, so that modules
// above net/ compile fast.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace plumb::net {

// Header fields in arrival order; names keep their case, lookups ignore it.
using Headers = std::vector<std::pair<std::string, std::string>>;

// Value of the first header named `name` (ASCII case-insensitive), or "" when absent.
std::string_view find_header(const Headers& headers, std::string_view name);

// True when a and b are equal ignoring ASCII case.
bool iequals(std::string_view a, std::string_view b);

// "OK", "Not Found", ...; "Unknown" for codes without a standard reason.
std::string_view status_reason(int status);

// {"error":{"message":..., "type":..., "code":status}} — the OpenAI-style error body every net/
// error response uses. type is e.g. "invalid_request_error", "server_error".
std::string json_error_body(int status, std::string_view message, std::string_view type);

}  // namespace plumb::net
