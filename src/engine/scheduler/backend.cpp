#include "engine/scheduler/serving_engine.h"

namespace plumb::scheduler {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

namespace {
double span_ms(SteadyTime a, SteadyTime b) {
  if (a == SteadyTime{} || b == SteadyTime{} || b < a) return 0.0;
  return ms_between(a, b);
}
}  // namespace

double RequestTimings::queue_ms() const { return span_ms(arrival, first_scheduled); }
double RequestTimings::prefill_ms() const { return span_ms(first_scheduled, first_token); }
double RequestTimings::decode_ms() const { return span_ms(first_token, finished); }

}  // namespace plumb::scheduler
