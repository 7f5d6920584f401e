// safetensors reader: memory-mapped, validated, zero-copy.
//
// File layout: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data buffer; offsets are relative to the buffer's start. Everything in the header is
// validated before any tensor is handed out (see parse_safetensors_header); a tensor is a view into
// the read-only map, valid as long as the SafetensorsFile (or ModelTensors) that produced it lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/file.h"
#include "core/status.h"

namespace plumb::engine {

// Element types a safetensors file may hold that plumb reads. Others (F64, I8, BOOL, F8...) are
// refused with Unimplemented naming the tensor.
enum class TensorDType : uint8_t { kF32, kF16, kBF16, kI32, kI64 };
const char* tensor_dtype_name(TensorDType t);  // "F32", "F16", "BF16", "I32", "I64"
size_t tensor_dtype_size(TensorDType t);

// Where one tensor lives inside a file's data buffer (validated).
struct TensorInfo {
  std::string name;  // key in the header
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;  // empty = scalar (one element)
  uint64_t begin = 0;          // byte offset of the first element, relative to the data buffer
  uint64_t end = 0;            // one past the last byte; end - begin == numel * dtype size
  int64_t numel() const;
};

// A tensor as stored: a read-only view into a memory map. Never owns its bytes.
struct TensorView {
  std::string name;
  std::string file;  // the file it came from, for error messages
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  const unsigned char* data = nullptr;
  size_t nbytes = 0;
  int64_t numel() const;
  std::string shape_string() const;  // "[2, 3]"
};

// Validates a whole safetensors image (header length prefix + header + data) without touching
// the disk: header length within the file (and <= 100 MB, as the reference implementation
// limits), the header a well-formed JSON object, every entry a known dtype, a shape of
// non-negative integers, offsets [begin, end] with begin <= end, nbytes = product(shape) *
// dtype size with no overflow, and the tensors, sorted by offset, tiling the data buffer exactly
// (no overlap, no hole, nothing past its end) as the safetensors spec requires. Corrupt (or
// Unimplemented for an unsupported dtype) with a message naming `file_name` and the tensor.
Result<std::vector<TensorInfo>> parse_safetensors_header(std::span<const unsigned char> bytes,
                                                         std::string_view file_name);

// One memory-mapped .safetensors file. Move-only; thread-safe for reads.
class SafetensorsFile {
 public:
  // NotFound if missing; Corrupt if the header is invalid (see parse_safetensors_header).
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return map_.path(); }
  const std::vector<TensorInfo>& tensors() const { return infos_; }
  // NotFound naming the tensor and the file.
  Result<TensorView> get(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile map_;
  size_t data_start_ = 0;  // 8 + header length
  std::vector<TensorInfo> infos_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a Hugging Face model folder: model.safetensors, or the shards listed by
// model.safetensors.index.json ("weight_map": {tensor: file}). Every shard is validated and every
// weight_map entry must be found in the shard it names. Move-only; thread-safe for reads.
class ModelTensors {
 public:
  // NotFound if the folder has neither file; Corrupt for a bad index or shard.
  static Result<ModelTensors> open_folder(const std::string& dir);
  // A single file (tests, reference.safetensors).
  static Result<ModelTensors> open_file(const std::string& path);

  bool contains(std::string_view name) const { return where_.find(name) != where_.end(); }
  // NotFound naming the tensor.
  Result<TensorView> get(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*, std::less<>> where_;
};

// Scans every floating-point tensor (F32, F16, BF16) of `tensors`, in name order, for a NaN or an
// infinity (`--check-weights`). Corrupt naming the first bad tensor, its file, the flat index of
// its first non-finite element and what it holds; OK when every value is finite. Reads every byte of
// the weights (about a second per few GB).
Status check_finite(const ModelTensors& tensors);

// Writes a safetensors file (the header padded to 8 bytes, as the reference writer does); used by
// tests and tools. Each tensor's bytes must hold numel * dtype size bytes.
struct TensorToWrite {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;
};
std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors);

}  // namespace plumb::engine
