// The safetensors header validator (engine/safetensors.h) on whole file images. Invariants for an
// accepted image, as the header promises: every tensor's [begin, end) lies inside the data buffer,
// end - begin = numel * dtype size, and the tensors sorted by offset tile the buffer exactly.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "engine/safetensors.h"
#include "fuzz/fuzz_target.h"

PLUMB_FUZZ_TARGET(safetensors) {
  auto bytes =
      std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(input.data()), input.size());
  auto parsed = plumb::engine::parse_safetensors_header(bytes, "fuzz.safetensors");
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) return "refused without a message";
    return "";
  }
  std::vector<plumb::engine::TensorInfo> infos = *parsed;
  if (input.size() < 8) return "accepted an image shorter than its length prefix";
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(input[size_t(i)]);
  if (header_len > input.size() - 8) return "accepted a header longer than the image";
  uint64_t data_size = input.size() - 8 - header_len;
  std::sort(infos.begin(), infos.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  uint64_t at = 0;
  for (const auto& t : infos) {
    if (t.begin != at) return "tensor '" + t.name + "' leaves a hole or overlaps";
    if (t.end < t.begin || t.end > data_size) return "tensor '" + t.name + "' lies outside the data buffer";
    for (int64_t d : t.shape) {
      if (d < 0) return "tensor '" + t.name + "' has a negative dimension";
    }
    if (uint64_t(t.numel()) * plumb::engine::tensor_dtype_size(t.dtype) != t.end - t.begin) {
      return "tensor '" + t.name + "' size disagrees with its shape";
    }
    at = t.end;
  }
  if (at != data_size) return "the tensors do not cover the data buffer";
  return "";
}
