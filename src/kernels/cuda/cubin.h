// Reading a cubin (an NVIDIA ELF64 object) on the host without a GPU or the driver: the SM it was
// built for, the arch NVRTC was given, whether the candidate's entry is there, and the launch
// configuration the candidate declared (the initial bytes of its `plumb_launch` __constant__).
//
// The SM comes from e_flags (bits 8-15 from ELF ABI version 8, as CUDA 12.8+ writes; bits 0-7
// before). e_flags do not tell sm_90 from sm_90a; the "-arch sm_90a" string in the toolkit note
// (.note.nv.tkinfo) does, and `arch` is taken from there.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "kernels/cuda/abi.h"

namespace plumb::kernels::cuda {

struct CubinInfo {
  int sm = 0;                          // e.g. 90
  std::string arch;                    // e.g. "sm_90a" (from the toolkit note; empty if absent)
  bool has_entry = false;              // a function symbol plumb_candidate
  std::optional<LaunchConfig> launch;  // the plumb_launch constant's initial value
};

// Corrupt when the bytes are not a 64-bit little-endian ELF of machine EM_CUDA (190) or a section,
// symbol or string lies outside the file.
Result<CubinInfo> read_cubin(std::string_view elf);

}  // namespace plumb::kernels::cuda
