#include "engine/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/json.h"

namespace plumb::engine {

const char* tensor_dtype_name(TensorDType t) {
  switch (t) {
    case TensorDType::kF32:
      return "F32";
    case TensorDType::kF16:
      return "F16";
    case TensorDType::kBF16:
      return "BF16";
    case TensorDType::kI32:
      return "I32";
    case TensorDType::kI64:
      return "I64";
  }
  return "?";
}

size_t tensor_dtype_size(TensorDType t) {
  switch (t) {
    case TensorDType::kF32:
      return 4;
    case TensorDType::kF16:
    case TensorDType::kBF16:
      return 2;
    case TensorDType::kI32:
      return 4;
    case TensorDType::kI64:
      return 8;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

Status bad(std::string_view file, const std::string& what) {
  return corrupt("safetensors file '" + std::string(file) + "': " + what);
}

bool as_u64(const json::value& v, uint64_t* out) {
  if (v.is_uint64()) {
    *out = v.get_uint64();
    return true;
  }
  if (v.is_int64() && v.get_int64() >= 0) {
    *out = uint64_t(v.get_int64());
    return true;
  }
  return false;
}

Result<TensorDType> parse_dtype(std::string_view s) {
  if (s == "F32") return TensorDType::kF32;
  if (s == "F16") return TensorDType::kF16;
  if (s == "BF16") return TensorDType::kBF16;
  if (s == "I32") return TensorDType::kI32;
  if (s == "I64") return TensorDType::kI64;
  return unimplemented("dtype '" + std::string(s) + "' is not supported (F32, F16, BF16, I32, I64)");
}

}  // namespace

namespace {

// One tensor's entry: dtype, shape and data_offsets, whose span must match dtype x shape and lie
// inside the data buffer.
Result<TensorInfo> parse_tensor_entry(std::string_view file_name, const std::string& name,
                                      const json::value& value, uint64_t buffer_size) {
  auto where = [&](const std::string& what) { return bad(file_name, "tensor '" + name + "': " + what); };
  if (!value.is_object()) return where("entry must be an object");
  const auto& e = value.get_object();
  if (e.size() != 3) return where("entry must have exactly dtype, shape and data_offsets");
  const auto* dt = e.if_contains("dtype");
  const auto* sh = e.if_contains("shape");
  const auto* off = e.if_contains("data_offsets");
  if (!dt || !dt->is_string()) return where("missing or non-string 'dtype'");
  if (!sh || !sh->is_array()) return where("missing or non-list 'shape'");
  if (!off || !off->is_array() || off->get_array().size() != 2)
    return where("'data_offsets' must be [begin, end]");
  TensorInfo info;
  info.name = name;
  auto dtype = parse_dtype(dt->get_string());
  if (!dtype.ok())
    return Status(dtype.status().code(), "safetensors file '" + std::string(file_name) + "': tensor '" +
                                             name + "': " + dtype.status().message());
  info.dtype = *dtype;
  // numel * dtype size must not overflow and must fit the buffer; checking against the buffer
  // size at each step bounds every intermediate.
  uint64_t nbytes = tensor_dtype_size(info.dtype);
  bool has_zero = false;
  for (const auto& d : sh->get_array()) {
    uint64_t dim = 0;
    if (!as_u64(d, &dim)) return where("shape entries must be non-negative integers");
    if (dim > uint64_t(INT64_MAX)) return where("shape entry too large");
    info.shape.push_back(int64_t(dim));
    if (dim == 0) has_zero = true;
  }
  if (has_zero) {
    nbytes = 0;
  } else {
    for (int64_t dim : info.shape) {
      if (uint64_t(dim) > buffer_size || nbytes > buffer_size / uint64_t(dim)) {
        return where("shape " + json::dump(*sh) + " needs more bytes than the data buffer holds (" +
                     std::to_string(buffer_size) + ")");
      }
      nbytes *= uint64_t(dim);
    }
  }
  if (!as_u64(off->get_array()[0], &info.begin) || !as_u64(off->get_array()[1], &info.end)) {
    return where("data_offsets must be non-negative integers");
  }
  if (info.begin > info.end) return where("data_offsets begin > end");
  if (info.end > buffer_size) {
    return where("data_offsets end " + std::to_string(info.end) + " is past the data buffer (" +
                 std::to_string(buffer_size) + " bytes); the file is truncated or the header lies");
  }
  if (info.end - info.begin != nbytes) {
    return where("data_offsets span " + std::to_string(info.end - info.begin) + " bytes but dtype " +
                 tensor_dtype_name(info.dtype) + " and shape " + json::dump(*sh) + " need " +
                 std::to_string(nbytes));
  }
  return info;
}

// The tensors tile the data buffer exactly: no overlap, no hole, nothing left over.
Status check_tiling(const std::vector<TensorInfo>& infos, uint64_t buffer_size, std::string_view file_name) {
  std::vector<const TensorInfo*> order;
  order.reserve(infos.size());
  for (const auto& i : infos) order.push_back(&i);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  for (const TensorInfo* t : order) {
    if (t->begin < pos) return bad(file_name, "tensor '" + t->name + "' overlaps the tensor before it");
    if (t->begin > pos) {
      return bad(file_name, "tensor '" + t->name + "' leaves a hole of " + std::to_string(t->begin - pos) +
                                " bytes before it; the data buffer must be tiled exactly");
    }
    pos = t->end;
  }
  if (pos != buffer_size) {
    return bad(file_name, "the tensors cover " + std::to_string(pos) + " bytes but the data buffer has " +
                              std::to_string(buffer_size));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<TensorInfo>> parse_safetensors_header(std::span<const unsigned char> bytes,
                                                         std::string_view file_name) {
  if (bytes.size() < 8) {
    return bad(file_name,
               "file is " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderBytes) return bad(file_name, "header length " + std::to_string(n) + " exceeds 100 MB");
  if (n > bytes.size() - 8) {
    return bad(file_name, "header length " + std::to_string(n) + " runs past the end of the file (" +
                              std::to_string(bytes.size()) +
                              " bytes); the file is truncated or not safetensors");
  }
  if (n < 2 || bytes[8] != '{') return bad(file_name, "header is not a JSON object");
  const uint64_t buffer_size = bytes.size() - 8 - n;
  auto parsed = json::parse_object(std::string_view(reinterpret_cast<const char*>(bytes.data() + 8), n));
  if (!parsed.ok()) return bad(file_name, "header " + parsed.status().message());

  std::vector<TensorInfo> infos;
  infos.reserve(parsed->size());
  for (const auto& kv : *parsed) {
    std::string name(kv.key());
    if (name == "__metadata__") {
      if (!kv.value().is_object()) return bad(file_name, "__metadata__ must be an object");
      for (const auto& m : kv.value().get_object()) {
        if (!m.value().is_string()) return bad(file_name, "__metadata__ values must be strings");
      }
      continue;
    }
    PLUMB_ASSIGN_OR_RETURN(auto info, parse_tensor_entry(file_name, name, kv.value(), buffer_size));
    infos.push_back(std::move(info));
  }
  PLUMB_RETURN_IF_ERROR(check_tiling(infos, buffer_size, file_name));
  return infos;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  PLUMB_ASSIGN_OR_RETURN(f.map_, MappedFile::open(path));
  PLUMB_ASSIGN_OR_RETURN(f.infos_, parse_safetensors_header(std::span(f.map_.data(), f.map_.size()), path));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | f.map_.data()[i];
  f.data_start_ = 8 + n;
  for (size_t i = 0; i < f.infos_.size(); ++i) {
    if (!f.index_.emplace(f.infos_[i].name, i).second) {
      return corrupt("safetensors file '" + path + "': duplicate tensor '" + f.infos_[i].name + "'");
    }
  }
  // The header was validated above, so re-parsing it for the metadata cannot fail.
  auto hdr = json::parse_object(std::string_view(reinterpret_cast<const char*>(f.map_.data() + 8), n));
  if (hdr.ok()) {
    if (const auto* m = hdr->if_contains("__metadata__")) {
      for (const auto& kv : m->get_object())
        f.metadata_[std::string(kv.key())] = std::string(kv.value().get_string());
    }
  }
  return f;
}

Result<TensorView> SafetensorsFile::get(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return not_found("tensor '" + std::string(name) + "' not found in '" + map_.path() + "'");
  }
  const TensorInfo& i = infos_[it->second];
  TensorView v;
  v.name = i.name;
  v.file = map_.path();
  v.dtype = i.dtype;
  v.shape = i.shape;
  v.data = map_.data() + data_start_ + i.begin;
  v.nbytes = size_t(i.end - i.begin);
  return v;
}

Result<ModelTensors> ModelTensors::open_file(const std::string& path) {
  ModelTensors m;
  PLUMB_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(path));
  m.files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
  for (const auto& i : m.files_.back()->tensors()) m.where_[i.name] = m.files_.back().get();
  return m;
}

Result<ModelTensors> ModelTensors::open_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    auto parsed = json::parse_file(index);
    if (!parsed.ok()) return Status(Code::kCorrupt, parsed.status().message());
    const auto* wm = parsed->is_object() ? parsed->get_object().if_contains("weight_map") : nullptr;
    if (!wm || !wm->is_object()) return corrupt("'" + index + "': missing object 'weight_map'");
    ModelTensors m;
    std::map<std::string, SafetensorsFile*> by_file;
    for (const auto& kv : wm->get_object()) {
      if (!kv.value().is_string()) return corrupt("'" + index + "': weight_map values must be file names");
      std::string file(kv.value().get_string());
      if (file.find('/') != std::string::npos || file.find("..") != std::string::npos) {
        return corrupt("'" + index + "': shard name '" + file + "' must be a plain file name");
      }
      auto it = by_file.find(file);
      if (it == by_file.end()) {
        PLUMB_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(dir + "/" + file));
        m.files_.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
        it = by_file.emplace(file, m.files_.back().get()).first;
      }
      std::string name(kv.key());
      if (!it->second->get(name).ok()) {
        return corrupt("'" + index + "' maps tensor '" + name + "' to '" + file +
                       "', which does not contain it");
      }
      m.where_[name] = it->second;
    }
    return m;
  }
  if (fs::exists(single, ec)) return open_file(single);
  return not_found("model folder '" + dir +
                   "' has neither model.safetensors nor model.safetensors.index.json");
}

Result<TensorView> ModelTensors::get(std::string_view name) const {
  auto it = where_.find(name);
  if (it == where_.end())
    return not_found("tensor '" + std::string(name) + "' not found in the model's safetensors");
  return it->second->get(name);
}

std::vector<std::string> ModelTensors::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : where_) out.push_back(k);
  return out;
}

namespace {

// The first element of `n` `bytes`-wide values whose exponent bits (`mask`) are all ones, or -1.
// Branch-free over blocks (vectorizes); the exact index is found in the block that has one.
template <typename U>
int64_t first_all_ones(const unsigned char* data, int64_t n, U mask) {
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    U bad = 0;
    for (int64_t i = b; i < e; ++i) {
      U v;
      std::memcpy(&v, data + size_t(i) * sizeof(U), sizeof(U));
      bad |= U((v & mask) == mask);
    }
    if (bad == 0) continue;
    for (int64_t i = b; i < e; ++i) {
      U v;
      std::memcpy(&v, data + size_t(i) * sizeof(U), sizeof(U));
      if ((v & mask) == mask) return i;
    }
  }
  return -1;
}

}  // namespace

Status check_finite(const ModelTensors& tensors) {
  for (const std::string& name : tensors.names()) {
    PLUMB_ASSIGN_OR_RETURN(TensorView t, tensors.get(name));
    int64_t at = -1;
    bool nan = false;
    switch (t.dtype) {
      case TensorDType::kF32:
        at = first_all_ones<uint32_t>(t.data, t.numel(), 0x7f800000u);
        if (at >= 0) {
          uint32_t v;
          std::memcpy(&v, t.data + size_t(at) * 4, 4);
          nan = (v & 0x007fffffu) != 0;
        }
        break;
      case TensorDType::kF16:
        at = first_all_ones<uint16_t>(t.data, t.numel(), uint16_t(0x7c00));
        if (at >= 0) {
          uint16_t v;
          std::memcpy(&v, t.data + size_t(at) * 2, 2);
          nan = (v & 0x03ffu) != 0;
        }
        break;
      case TensorDType::kBF16:
        at = first_all_ones<uint16_t>(t.data, t.numel(), uint16_t(0x7f80));
        if (at >= 0) {
          uint16_t v;
          std::memcpy(&v, t.data + size_t(at) * 2, 2);
          nan = (v & 0x007fu) != 0;
        }
        break;
      default:
        break;  // integer tensors hold no NaN
    }
    if (at >= 0) {
      return corrupt("tensor '" + name + "' " + t.shape_string() + " in " + t.file + " holds " +
                     (nan ? "NaN" : "an infinity") + " at element " + std::to_string(at) +
                     " (flat index, of " + std::to_string(t.numel()) +
                     "): the weights are broken; re-download or re-export the model");
    }
  }
  return Status::Ok();
}

std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors) {
  json::object hdr;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    json::object e;
    e["dtype"] = tensor_dtype_name(t.dtype);
    json::array shape;
    for (int64_t d : t.shape) shape.push_back(d);
    e["shape"] = std::move(shape);
    e["data_offsets"] = json::array{off, off + t.bytes.size()};
    off += t.bytes.size();
    hdr[t.name] = std::move(e);
  }
  std::string h = json::dump(hdr);
  while (h.size() % 8 != 0) h.push_back(' ');
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
  out += h;
  for (const auto& t : tensors) out += t.bytes;
  return out;
}

}  // namespace plumb::engine
