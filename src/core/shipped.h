// Where plumb finds what it ships: models/ (model configs and the small trained model) and data/
// (datasets, anchors). One search for every command, so a build tree, a copied binary and an
// installed one find the same folders.
//
// Candidates, in order (a folder is taken only if it exists):
//   1. the variable: $PLUMB_MODELS_DIR for models; $PLUMB_DATA_DIR for data (then data/ beside
//      $PLUMB_MODELS_DIR);
//   2. the repository above the executable: the first of its ancestors (up to six levels: build trees
//      put plumb two levels down and test binaries four) that holds models/configs;
//   3. the install prefix: <exe>/../share/plumb/<kind> (what `cmake --install` writes);
//   4. ./<kind> in the working directory.
//
// Thread-safety: stateless; reads the environment and the file system.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace plumb {

enum class Shipped { kModels, kData };

// Every candidate folder for `kind`, existing or not, in search order.
std::vector<std::string> shipped_candidates(Shipped kind);
// The first existing candidate (canonical path). NotFound naming every place tried and the
// variable that points plumb at it.
Result<std::string> find_shipped_dir(Shipped kind);
// `relative` below the first candidate that holds it, e.g. ("data", "mc_heldout.jsonl").
// NotFound naming every path tried and the variable to set.
Result<std::string> find_shipped_file(Shipped kind, const std::string& relative);

}  // namespace plumb
