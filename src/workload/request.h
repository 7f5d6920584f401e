// Requests and request sets (docs/protocol.md §2): the unit every system is scored on, byte-identical
// across systems because each request carries a content hash and each set a set hash.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace plumb::workload {

// One chat message.
struct Message {
  std::string role;     // "system", "user" or "assistant"
  std::string content;  // UTF-8 text
};

// One inference request as the load generator sends it. Exactly one of `messages` (chat API) and
// `prompt` (completions API) is set.
struct Request {
  std::vector<Message> messages;      // chat API; empty when `prompt` is set
  std::optional<std::string> prompt;  // completions API; nullopt for chat requests
  int64_t max_tokens = 0;             // output length asked for, >= 1
  double temperature = 0.0;           // sampling temperature, >= 0
  bool ignore_eos = true;             // ask the server to generate max_tokens regardless of EOS
  bool stream = true;                 // stream the response (SSE); transport only, not hashed
  int64_t prompt_tokens = -1;         // input tokens as counted when the request was made; -1 unknown;
                                      // informative only, not hashed

  bool is_chat() const { return !prompt.has_value(); }
};

// The object whose canonical JSON is hashed: {"ignore_eos","max_tokens","messages","temperature"}
// for chat requests, with "prompt" (a string) in place of "messages" for completions requests.
json::object hashed_fields(const Request& r);
// SHA-256 (lowercase hex) of json::canonical(hashed_fields(r)).
std::string content_hash(const Request& r);

// One JSONL line: the hashed fields plus "hash", "stream" and (when known) "prompt_tokens".
json::object to_json(const Request& r);
// Parses the fields of to_json (a "hash" field, if present, is ignored here). InvalidArgument naming
// the field on a missing or mistyped field or an out-of-range value.
Result<Request> from_json(const json::object& o);
// InvalidArgument if r is not sendable (no content, both messages and prompt, max_tokens < 1, ...).
Status validate(const Request& r);

// A request set: requests in order with their content hashes and the set hash.
struct RequestSet {
  std::vector<Request> requests;    // in request-set order (the order of the file)
  std::vector<std::string> hashes;  // hashes[i] = content_hash(requests[i])
  std::string set_hash;             // SHA-256 (hex) of the concatenated hex line hashes
};

// Builds a set from requests, computing every hash. InvalidArgument (naming the index) if a request
// does not validate.
Result<RequestSet> make_request_set(std::vector<Request> requests);
// SHA-256 of the concatenation of the given hex hashes.
std::string set_hash_of(const std::vector<std::string>& hashes);

// Calls `fn` with each non-blank line of JSONL `text` parsed as a JSON object, with its 1-based line
// number, in order. Stops at the first error: a line that is not a JSON object, or an error `fn`
// returns; either comes back prefixed "line N: ". The reader under every JSONL format plumb reads.
Status for_each_jsonl_object(std::string_view text,
                             const std::function<Status(const json::object& obj, size_t line_no)>& fn);

// JSONL text of a set: one to_json line per request, each ending in '\n'.
std::string to_jsonl(const RequestSet& set);
// Parses JSONL; blank lines are skipped. Every line must carry a "hash" equal to its recomputed
// content hash. Errors name the 1-based line: InvalidArgument for malformed lines, Corrupt for a
// hash mismatch. An empty file is an InvalidArgument.
// With `hashes_computed`, a line without "hash" (an OpenAI-style request file: "messages" or
// "prompt", "max_tokens", other fields as from_json reads them) is accepted and hashed here, and
// counted; a line that carries a hash is still verified.
Result<RequestSet> parse_jsonl(std::string_view text, size_t* hashes_computed = nullptr);
// Writes atomically (core/file.h).
Status write_request_set(const std::string& path, const RequestSet& set);
// Reads and verifies (hashes_computed as parse_jsonl); errors are prefixed with the path.
Result<RequestSet> read_request_set(const std::string& path, size_t* hashes_computed = nullptr);

}  // namespace plumb::workload
