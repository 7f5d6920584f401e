// The PostgreSQL backend's entry points (internal to ledger/): Ledger::open and
// Ledger::open_for_inspection hand a postgresql:// URL here.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "ledger/ledger.h"

namespace plumb::ledger {

// Connects to the database at `url` (a libpq connection URI). Unless `inspect`, creates the schema
// in an empty database (the connection's current schema, normally public) or checks that an
// existing one's validator is this build's, as Ledger::open does for a file.
Result<std::unique_ptr<Ledger>> open_postgres(const std::string& url, bool inspect);

}  // namespace plumb::ledger
