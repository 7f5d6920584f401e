#include "loadgen/null_target.h"

#include <algorithm>

namespace plumb::loadgen {

void NullTarget::send(const workload::Request& request, StreamSink* sink) {
  const int32_t per = std::max<int32_t>(1, opts_.tokens_per_chunk);
  sink->on_first_byte(clock_.now());
  int64_t left = request.max_tokens;
  uint64_t n = 0;
  while (left > 0) {
    int32_t k = int32_t(std::min<int64_t>(per, left));
    sink->on_chunk(clock_.now(), k, {});
    left -= k;
    ++n;
  }
  events_ += n;
  if (opts_.report_usage) sink->on_usage({request.prompt_tokens, request.max_tokens});
  sink->on_end(clock_.now());
}

}  // namespace plumb::loadgen
