// Provenance capture (docs/protocol.md §6): what build measured, and on which machine.
//
// The machine fingerprint names the hardware and OS a result belongs to; results are only compared
// within one fingerprint. Its hash is SHA-256 of canonical_json(). Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace plumb::protocol {

// The build of plumb itself, from plumb_build_info.h (written at build time).
struct BuildInfo {
  std::string version;     // PLUMB_VERSION, e.g. "0.1.0"
  std::string git_commit;  // full commit hash, "-dirty" suffix if the tree had local changes
  std::string build_type;  // CMAKE_BUILD_TYPE
  std::string compiler;    // e.g. "GNU 12.2.0"
};
BuildInfo build_info();

struct MachineFingerprint {
  std::string cpu_model;     // /proc/cpuinfo "model name" (first CPU); "unknown" if absent
  int64_t cores = 0;         // online logical CPUs
  int64_t memory_bytes = 0;  // /proc/meminfo MemTotal
  std::string gpu_model;     // nvidia-smi name(s), ";"-joined; "none" when no NVIDIA GPU/driver
  std::string gpu_driver;    // nvidia-smi driver_version; "none" when no GPU
  std::string kernel;        // uname: "<sysname> <release> <machine>"

  // Canonical JSON of the six fields (sorted keys, no spaces).
  std::string canonical_json() const;
  // SHA-256 hex of canonical_json().
  std::string hash() const;
};

// Reads /proc, uname and (if on PATH) nvidia-smi. IoError only if uname fails; missing /proc
// entries give "unknown"/0 rather than an error so the fingerprint is always available.
Result<MachineFingerprint> capture_machine();

}  // namespace plumb::protocol
