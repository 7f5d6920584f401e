// The ledger's schema as SQL migrations (internal to ledger/; tests read it to check the file).
#pragma once

#include <string>
#include <vector>

namespace plumb::ledger {

// migrations()[i] takes a database from schema version i to i + 1. Released entries never change.
const std::vector<std::string>& migrations();

}  // namespace plumb::ledger
