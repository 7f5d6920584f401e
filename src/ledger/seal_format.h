// The seal's canonical form, shared by both ledger backends (ledger.cpp for SQLite, pg_ledger.cpp
// for PostgreSQL) so that one run seals to the same hash on each, and one seal row is checked by
// the same rules. Internal to src/ledger.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/sha256.h"
#include "core/status.h"

namespace plumb::ledger::seal_format {

// The run row and the rows it refers to, in the order they are hashed; the caller appends the run
// id (a placeholder or a literal).
inline constexpr const char* kRunSelect =
    "SELECT r.id, r.machine_id, r.build_id, r.protocol_id, r.request_set_id, r.registration_id, r.arm, "
    "r.pair_index, r.scenario, r.size_class, r.target_engine, r.engine_config, r.engine_config_hash, "
    "r.model_identity, r.seed, r.effective_settings, r.started_at, r.ended_at, r.valid, r.validity_json, "
    "r.gate_status, r.objective, m.fingerprint_hash, m.cpu_model, m.cores, m.memory_bytes, m.gpu_model, "
    "m.gpu_driver, m.kernel, b.version, b.git_commit, b.build_type, b.compiler, p.version, p.hash, "
    "s.set_hash, s.scenario, s.size_class, s.seed, s.num_requests, g.registration_hash "
    "FROM runs r JOIN machines m ON m.id = r.machine_id JOIN builds b ON b.id = r.build_id "
    "JOIN protocols p ON p.id = r.protocol_id JOIN request_sets s ON s.id = r.request_set_id "
    "LEFT JOIN registrations g ON g.id = r.registration_id WHERE r.id = ";

// A subset run's slice (schema 4), hashed after its metrics when the run has one; the caller appends
// the run id.
inline constexpr const char* kSubsetSelect =
    "SELECT kind, full_set_hash, full_requests, first_idx, num_requests, part, parts FROM run_subsets "
    "WHERE run_id = ";

// A real as both backends store it: -0.0 becomes +0.0, every other value is itself. SQLite's REAL
// column does this on its own (it keeps an integral real as an integer, and 0 has no sign);
// PostgreSQL's float8 keeps the sign, so the PostgreSQL backend writes every real through this,
// and a run with a -0.0 figure stores, reads back and hashes alike on both ("r0;"). Rows already
// stored with the sign (written before this, or by raw SQL) hash as they are stored ("r-0;"):
// RowText::real never normalizes, so their seals still verify.
inline double stored_real(double v) { return v == 0 ? 0.0 : v; }

// One row of a run's canonical content as the seal hashes it, cell by cell: NULL "n", integer
// "i<decimal>", real "r<%.17g>" (printf's text, which round-trips), text "t<bytes>:<text>"; each
// cell ends with ';', the row with '\n'. The cells are built in one buffer and the row goes into
// the hash as one update. A reused RowText keeps its buffer's capacity. Not thread-safe.
class RowText {
 public:
  void null() { buf_ += "n;"; }
  void integer(int64_t v);
  void real(double v);
  void text(std::string_view v);
  // Ends the row ('\n'), hashes it into `h`, and starts the next row empty.
  void end_row(Sha256& h);
  // The row so far (for tests).
  const std::string& str() const { return buf_; }

 private:
  std::string buf_;
};

// A seal's own hash: its position, its run, the hash before it and its run's content hash.
std::string link_hash(int64_t seq, int64_t run_id, const std::string& prev, const std::string& content);

// One seal row of the chain checked against the one before it (`expect`ed seq, `prev` hash) and
// against its run's content hashed now (`now`); each finding is appended to `problems`.
void check_seal(int64_t seq, int64_t run, const std::string& content, const std::string& prev_hash,
                const std::string& hash, int64_t expect, const std::string& prev,
                const Result<std::string>& now, std::vector<std::string>& problems);

}  // namespace plumb::ledger::seal_format
