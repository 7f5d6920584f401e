// Files: whole-file reads, crash-safe writes, and read-only memory maps.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plumb {

Result<std::string> read_file(const std::string& path);
// Writes to "<path>.tmp.<pid>", fsyncs, renames over path: readers see the old or the new file,
// never half of one. ResourceExhausted when the disk is full (ENOSPC), IoError otherwise.
Status write_file_atomic(const std::string& path, std::string_view data);

// `name` as one file-name component: every character other than a letter, a digit, '.', '-' or '_'
// becomes '_', and so does a leading '.' (never ".", ".." or a hidden file); cut to `max_len`
// characters. For a name chosen by a job or a proposer, made safe to use in a path.
std::string safe_file_name(std::string_view name, size_t max_len);

// A read-only private memory map of a whole file. Move-only; unmaps on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // NotFound if missing; IoError if it cannot be mapped. A zero-length file maps to size()==0.
  static Result<MappedFile> open(const std::string& path);

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace plumb
