#include "ledger/seal_format.h"

#include <charconv>
#include <system_error>

#include "core/sha256.h"

namespace plumb::ledger::seal_format {

// std::to_chars rather than snprintf: no format parsing and no locale per cell (the rows of a run
// are hashed as it is written, a million cells a second). to_chars with chars_format::general and
// precision 17 is specified as printf's "%.17g" in the C locale, so the text is the same.
void RowText::integer(int64_t v) {
  char b[24];
  auto r = std::to_chars(b, b + sizeof b, v);
  buf_ += 'i';
  buf_.append(b, r.ptr);
  buf_ += ';';
}

void RowText::real(double v) {
  char b[40];
  auto r = std::to_chars(b, b + sizeof b, v, std::chars_format::general, 17);
  buf_ += 'r';
  buf_.append(b, r.ptr);
  buf_ += ';';
}

void RowText::text(std::string_view v) {
  char b[24];
  auto r = std::to_chars(b, b + sizeof b, v.size());
  buf_ += 't';
  buf_.append(b, r.ptr);
  buf_ += ':';
  buf_.append(v);
  buf_ += ';';
}

void RowText::end_row(Sha256& h) {
  buf_ += '\n';
  h.update(buf_);
  buf_.clear();
}

std::string link_hash(int64_t seq, int64_t run_id, const std::string& prev, const std::string& content) {
  return sha256_hex("plumb-seal/1 " + std::to_string(seq) + " " + std::to_string(run_id) + " " + prev + " " +
                    content);
}

void check_seal(int64_t seq, int64_t run, const std::string& content, const std::string& prev_hash,
                const std::string& hash, int64_t expect, const std::string& prev,
                const Result<std::string>& now, std::vector<std::string>& problems) {
  const std::string where = "seal " + std::to_string(seq) + " (run " + std::to_string(run) + ")";
  if (seq != expect)
    problems.push_back(where + ": seals " + std::to_string(expect) + ".." + std::to_string(seq - 1) +
                       " are missing (deleted)");
  if (prev_hash != prev)
    problems.push_back(where +
                       ": its prev_hash is not the previous seal's hash (a seal was deleted, "
                       "inserted or edited before it)");
  if (link_hash(seq, run, prev_hash, content) != hash)
    problems.push_back(where + ": its hash does not match its fields (the seal row was edited)");
  if (!now.ok())
    problems.push_back(where + ": " + now.status().message());
  else if (*now != content)
    problems.push_back(where +
                       ": the run's content changed after it was sealed (its run row, a "
                       "per-request row, a metric or a row it refers to was edited, inserted or deleted)");
}

}  // namespace plumb::ledger::seal_format
