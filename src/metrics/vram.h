// GPU memory in use during a run, sampled the way InferenceBench samples it (`nvidia-smi
// --query-gpu=memory.used --format=csv,noheader,nounits` every half second, the largest card's
// figure, the peak over the run), so that `plumb bench --ib-json` can fill IB's `vram_peak_mb`.
// Where nvidia-smi is missing or fails, the peak is absent with the reason, never 0 (IB writes 0.0
// then, which reads as a measurement).
//
// The figure is the card's memory in use by every process, not only the server's: another job on
// the card counts. The sampler runs one nvidia-smi at a time on its own thread, so a sample costs a
// process start on the client's machine (about 20-50 ms of one core every interval).
//
// Thread-safety: start() and stop() from one thread; the sampling thread touches nothing else.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "core/status.h"

namespace plumb::metrics {

// nvidia-smi's memory.used output in csv,noheader,nounits form: one MiB figure per card, one per
// line. The largest; InvalidArgument naming the line when a line is not a number ("[N/A]", an
// error message) or there is none.
Result<double> parse_memory_used(std::string_view out);

struct VramPeak {
  std::optional<double> peak_mib;  // the largest sample; nullopt when no sample was taken
  int64_t samples = 0;             // successful samples
  std::string unavailable;         // why there is no figure ("" when there is one)
};

class VramSampler {
 public:
  // `program`: the nvidia-smi to run (found on PATH when it has no '/').
  explicit VramSampler(std::chrono::milliseconds interval = std::chrono::milliseconds(500),
                       std::string program = "nvidia-smi");
  ~VramSampler();
  VramSampler(const VramSampler&) = delete;
  VramSampler& operator=(const VramSampler&) = delete;

  // Takes one sample now; when it fails, sampling stays off and stop() says why. Otherwise starts
  // the thread. Call once.
  void start();
  // Stops the thread (after at most one more sample) and returns the peak.
  VramPeak stop();

 private:
  bool sample();  // one nvidia-smi call into peak_/samples_ (or error_); false on failure
  void loop();

  std::chrono::milliseconds interval_;
  std::string program_;
  std::string path_;  // program_ found (first sample)
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  VramPeak peak_;
};

}  // namespace plumb::metrics
