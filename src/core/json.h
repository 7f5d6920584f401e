// JSON helpers over Boost.JSON: parsing with errors by value, canonical serialization for content
// hashes, and typed field access that says which field was wrong.
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plumb::json {

using boost::json::array;
using boost::json::object;
using boost::json::value;

// Parses text; InvalidArgument with line/column-free message "invalid JSON: <reason>" on error.
Result<value> parse(std::string_view text);
// Parses and requires an object at the top level.
Result<object> parse_object(std::string_view text);
// Reads and parses a file; NotFound / InvalidArgument naming the path.
Result<value> parse_file(const std::string& path);

// Compact serialization (Boost.JSON's default).
std::string dump(const value& v);
// Indented serialization for humans (2 spaces).
std::string dump_pretty(const value& v);
// Canonical form for hashing: object keys sorted bytewise, no spaces, numbers as Boost prints them.
std::string canonical(const value& v);

// Typed getters. Missing key -> the default (std::nullopt for opt_*). Present key of the wrong
// type -> InvalidArgument "field 'key' must be a <type>".
Result<std::optional<std::string>> opt_string(const object& o, std::string_view key);
Result<std::optional<int64_t>> opt_int(const object& o, std::string_view key);
Result<std::optional<double>> opt_double(const object& o, std::string_view key);  // accepts ints
Result<std::optional<bool>> opt_bool(const object& o, std::string_view key);

// Lenient reads for output and reports: the field's value when it is present and of that type,
// else std::nullopt (no error).
std::optional<double> number_at(const object& o, std::string_view key);  // any JSON number
std::optional<std::string> string_at(const object& o, std::string_view key);

// A number to write: the value, or null where it is not finite (NaN means "not measured"; JSON has
// no NaN or infinity) or absent.
value number_or_null(double v);
value number_or_null(const std::optional<double>& v);

}  // namespace plumb::json
