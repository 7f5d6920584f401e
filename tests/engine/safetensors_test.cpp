#include "engine/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/file.h"
#include "core/random.h"

namespace plumb::engine {
namespace {

std::string f32_bytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string valid_image() {
  return serialize_safetensors({
      {"a", TensorDType::kF32, {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
      {"b", TensorDType::kBF16, {4}, std::string(8, '\x01')},
      {"ids", TensorDType::kI64, {2}, std::string(16, '\0')},
  });
}

std::span<const unsigned char> span_of(const std::string& s) {
  return {reinterpret_cast<const unsigned char*>(s.data()), s.size()};
}

// Builds an image from a literal header and a data buffer of `data_len` bytes.
std::string image(const std::string& header, size_t data_len) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_len, '\0');
}

class TempDir {
 public:
  TempDir() {
    path_ = std::string(::testing::TempDir()) + "/plumb_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Safetensors, RoundTripZeroCopy) {
  TempDir d;
  std::string p = d.path() + "/model.safetensors";
  ASSERT_TRUE(write_file_atomic(p, valid_image()).ok());
  auto f = SafetensorsFile::open(p);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ(f->tensors().size(), 3u);
  auto a = f->get("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->dtype, TensorDType::kF32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  float v[6];
  std::memcpy(v, a->data, 24);
  EXPECT_EQ(v[5], 6.0f);
  EXPECT_EQ(a->shape_string(), "[2, 3]");
  EXPECT_EQ(f->get("zzz").status().code(), Code::kNotFound);
  // Header padded to 8 bytes: the first tensor is 8-byte aligned in the map.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 8, 0u);
}

TEST(Safetensors, ShardedFolderThroughIndex) {
  TempDir d;
  ASSERT_TRUE(write_file_atomic(d.path() + "/s1.safetensors",
                                serialize_safetensors({{"x", TensorDType::kF32, {1}, f32_bytes({7})}}))
                  .ok());
  ASSERT_TRUE(write_file_atomic(d.path() + "/s2.safetensors",
                                serialize_safetensors({{"y", TensorDType::kF32, {1}, f32_bytes({8})}}))
                  .ok());
  ASSERT_TRUE(
      write_file_atomic(d.path() + "/model.safetensors.index.json",
                        R"({"metadata": {}, "weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})")
          .ok());
  auto m = ModelTensors::open_folder(d.path());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(m->contains("x"));
  EXPECT_TRUE(m->contains("y"));
  float y = 0;
  std::memcpy(&y, m->get("y")->data, 4);
  EXPECT_EQ(y, 8.0f);

  // An index that maps a tensor to a shard without it is corrupt, naming both.
  ASSERT_TRUE(write_file_atomic(d.path() + "/model.safetensors.index.json",
                                R"({"weight_map": {"x": "s2.safetensors"}})")
                  .ok());
  auto bad = ModelTensors::open_folder(d.path());
  EXPECT_EQ(bad.status().code(), Code::kCorrupt);
  EXPECT_NE(bad.status().message().find("'x'"), std::string::npos);
  // A missing shard is NotFound.
  ASSERT_TRUE(write_file_atomic(d.path() + "/model.safetensors.index.json",
                                R"({"weight_map": {"x": "s9.safetensors"}})")
                  .ok());
  EXPECT_EQ(ModelTensors::open_folder(d.path()).status().code(), Code::kNotFound);
}

TEST(Safetensors, MissingFolderAndTruncatedFile) {
  TempDir d;
  EXPECT_EQ(ModelTensors::open_folder(d.path()).status().code(), Code::kNotFound);
  std::string img = valid_image();
  std::string p = d.path() + "/model.safetensors";
  ASSERT_TRUE(write_file_atomic(p, img.substr(0, img.size() - 3)).ok());
  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f.status().code(), Code::kCorrupt);
  EXPECT_NE(f.status().message().find(p), std::string::npos);
  ASSERT_TRUE(write_file_atomic(p, img.substr(0, 5)).ok());
  EXPECT_EQ(SafetensorsFile::open(p).status().code(), Code::kCorrupt);
  ASSERT_TRUE(write_file_atomic(p, "").ok());
  EXPECT_EQ(SafetensorsFile::open(p).status().code(), Code::kCorrupt);
}

TEST(Safetensors, LyingHeadersAreRefusedWithTheTensorNamed) {
  struct Case {
    std::string header;
    size_t data;
    const char* needle;
  };
  const Case cases[] = {
      // size != numel * dtype size
      {R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16, "need 16"},
      // more elements than the whole buffer holds
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8, "needs more bytes"},
      // past the end of the buffer
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 8, "past the data buffer"},
      // overlapping tensors
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "overlaps"},
      // a hole
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "hole"},
      // trailing bytes nobody owns
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8, "cover 4 bytes"},
      // begin > end
      {R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4, "begin > end"},
      // overflowing shape
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4, "more bytes"},
      // negative dim
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-negative"},
      // unknown dtype
      {R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8, "F64"},
      // missing field
      {R"({"a":{"dtype":"F32","shape":[1]}})", 4, "tensor 'a'"},
      // not JSON
      {R"({"a":)", 0, "invalid JSON"},
      // not an object
      {R"([1,2,3])", 0, "not a JSON object"},
  };
  for (const auto& c : cases) {
    auto r = parse_safetensors_header(span_of(image(c.header, c.data)), "f.safetensors");
    ASSERT_FALSE(r.ok()) << c.header;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("f.safetensors"), std::string::npos);
  }
  // A header length larger than the file.
  std::string img = valid_image();
  img[0] = char(0xff);
  img[1] = char(0xff);
  auto r = parse_safetensors_header(span_of(img), "f.safetensors");
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  EXPECT_NE(r.status().message().find("runs past the end"), std::string::npos);
}

TEST(Safetensors, ZeroSizedAndScalarTensorsAreValid) {
  auto r = parse_safetensors_header(
      span_of(image(
          R"({"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"s":{"dtype":"I32","shape":[],"data_offsets":[0,4]},"__metadata__":{"format":"pt"}})",
          4)),
      "f");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->size(), 2u);
}

// Thousands of seeded random mutations of a valid image: each must parse or be refused, never
// crash or read out of bounds (run under the asan preset for the out-of-bounds part). Mutations
// that keep the image valid are counted so the test proves it exercised both outcomes.
TEST(Safetensors, FuzzedHeadersNeverCrash) {
  const std::string base = valid_image();
  Rng rng(12345);
  int ok = 0, refused = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    std::string img = base;
    const int kind = int(rng.uniform_int(0, 4));
    const int64_t hdr_end = 8 + int64_t(uint8_t(base[0]) | (uint8_t(base[1]) << 8));
    if (kind == 0) {  // truncate anywhere
      img.resize(size_t(rng.uniform_int(0, int64_t(img.size()))));
    } else if (kind == 1) {  // flip random bytes in the header
      int flips = int(rng.uniform_int(1, 4));
      for (int i = 0; i < flips; ++i)
        img[size_t(rng.uniform_int(8, hdr_end - 1))] ^= char(1 << rng.uniform_int(0, 7));
    } else if (kind == 2) {  // replace a digit in the header with another digit
      std::vector<size_t> digits;
      for (size_t i = 8; i < size_t(hdr_end); ++i)
        if (img[i] >= '0' && img[i] <= '9') digits.push_back(i);
      img[digits[size_t(rng.uniform_int(0, int64_t(digits.size()) - 1))]] = char('0' + rng.uniform_int(0, 9));
    } else if (kind == 3) {  // corrupt the length prefix
      img[size_t(rng.uniform_int(0, 7))] = char(rng.next_u64() & 0xff);
    } else {  // insert or delete a header byte (header length left unchanged)
      size_t at = size_t(rng.uniform_int(8, hdr_end - 1));
      if (rng.uniform() < 0.5) {
        img.erase(at, 1);
      } else {
        img.insert(at, 1, "{}[],:\"0 9e-"[rng.uniform_int(0, 11)]);
      }
    }
    auto r = parse_safetensors_header(span_of(img), "fuzz");
    if (r.ok()) {
      ++ok;
      // Whatever passed must be in bounds.
      const uint64_t n =
          uint64_t(uint8_t(img[0])) | uint64_t(uint8_t(img[1])) << 8 | uint64_t(uint8_t(img[2])) << 16;
      for (const auto& t : *r) {
        ASSERT_LE(t.end, img.size() - 8 - n);
        ASSERT_EQ(t.end - t.begin, uint64_t(t.numel()) * tensor_dtype_size(t.dtype));
      }
    } else {
      ++refused;
      ASSERT_TRUE(r.status().code() == Code::kCorrupt || r.status().code() == Code::kUnimplemented)
          << r.status().to_string();
    }
  }
  EXPECT_GT(refused, 3000);
  EXPECT_GT(ok, 10);  // e.g. whitespace flips and digit rewrites that keep it consistent
}

}  // namespace
}  // namespace plumb::engine
