// Private to tune/: helpers that study.cpp, trial_loop.cpp, revalidate.cpp and study_report.cpp share.
// Not part of the module's face (tune/study.h); nothing outside src/tune includes it.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "ledger/ledger.h"
#include "protocol/protocol.h"
#include "tune/study.h"

namespace plumb::tune::internal {

// The protocol scenario of the study's options (scenario id and size class).
Result<protocol::Scenario> full_scenario(const StudyOptions& o);

// v printed with the printf format f (one double).
std::string fmt(const char* f, double v);

// v printed with f, or "-" when absent or not finite.
std::string opt_num(const std::optional<double>& v, const char* f = "%.4g");

// A stored trial as the study sees it; a configuration the space no longer accepts is kept as stored.
Trial decode_trial(const SearchSpace& sp, const ledger::TrialRow& t);

}  // namespace plumb::tune::internal
