// A bounds-checked reader of the few ELF64 structures read_cubin needs (header, section headers,
// .symtab/.strtab, one note). The cubin is untrusted input (a candidate may ship one), so every
// offset is checked against the file size before it is read.
#include "kernels/cuda/cubin.h"

#include <elf.h>
#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <vector>

namespace plumb::kernels::cuda {
namespace {

constexpr uint16_t kEmCuda = 190;

template <typename T>
bool read_at(std::string_view f, uint64_t off, T* out) {
  if (off > f.size() || f.size() - off < sizeof(T)) return false;
  std::memcpy(out, f.data() + off, sizeof(T));
  return true;
}

struct Elf {
  std::string_view file;
  Elf64_Ehdr eh{};
  std::vector<Elf64_Shdr> sections;

  std::string_view bytes(const Elf64_Shdr& s) const {
    if (s.sh_type == SHT_NOBITS || s.sh_offset > file.size() || file.size() - s.sh_offset < s.sh_size)
      return {};
    return file.substr(s.sh_offset, s.sh_size);
  }
  std::string_view name_at(const Elf64_Shdr& strtab, uint32_t off) const {
    std::string_view t = bytes(strtab);
    if (off >= t.size()) return {};
    size_t end = t.find('\0', off);
    return t.substr(off, end == std::string_view::npos ? t.size() - off : end - off);
  }
};

Result<Elf> open_elf(std::string_view f) {
  Elf e;
  e.file = f;
  if (!read_at(f, 0, &e.eh) || std::memcmp(e.eh.e_ident, ELFMAG, SELFMAG) != 0)
    return corrupt(
        "not an ELF file: a cubin starts with \\x7fELF (was the output PTX? compile with -arch=sm_XX)");
  if (e.eh.e_ident[EI_CLASS] != ELFCLASS64 || e.eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return corrupt("not a 64-bit little-endian ELF: not a cubin");
  if (e.eh.e_machine != kEmCuda)
    return corrupt(
        fmt::format("ELF machine {} is not NVIDIA CUDA ({}): not a cubin", e.eh.e_machine, kEmCuda));
  if (e.eh.e_shentsize != sizeof(Elf64_Shdr) || e.eh.e_shnum > 4096)
    return corrupt("cubin section table malformed");
  for (uint16_t i = 0; i < e.eh.e_shnum; ++i) {
    Elf64_Shdr s{};
    if (!read_at(f, e.eh.e_shoff + uint64_t(i) * sizeof(Elf64_Shdr), &s))
      return corrupt(fmt::format("cubin section header {} lies outside the file", i));
    e.sections.push_back(s);
  }
  return e;
}

// "sm_90a" from the toolkit note's "-arch sm_90a " option string; empty when absent.
std::string arch_from_notes(const Elf& e) {
  for (const auto& s : e.sections) {
    if (s.sh_type != SHT_NOTE) continue;
    std::string_view b = e.bytes(s);
    size_t at = b.find("-arch sm_");
    if (at == std::string_view::npos) continue;
    at += 6;
    size_t end = at;
    while (end < b.size() && (std::isalnum(static_cast<unsigned char>(b[end])) || b[end] == '_')) ++end;
    return std::string(b.substr(at, end - at));
  }
  return {};
}

Status read_symbols(const Elf& e, CubinInfo* info) {
  for (const auto& s : e.sections) {
    if (s.sh_type != SHT_SYMTAB) continue;
    if (s.sh_link >= e.sections.size() || s.sh_entsize != sizeof(Elf64_Sym))
      return corrupt("cubin symbol table malformed");
    std::string_view syms = e.bytes(s);
    for (size_t off = 0; off + sizeof(Elf64_Sym) <= syms.size(); off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym{};
      std::memcpy(&sym, syms.data() + off, sizeof(sym));
      std::string_view name = e.name_at(e.sections[s.sh_link], sym.st_name);
      if (name == kEntrySymbol && ELF64_ST_TYPE(sym.st_info) == STT_FUNC) info->has_entry = true;
      if (name != kLaunchSymbol) continue;
      if (sym.st_shndx >= e.sections.size() || sym.st_size != sizeof(LaunchConfig))
        return corrupt(fmt::format("plumb_launch is {} bytes, not the ABI's {}: declare it with PLUMB_LAUNCH",
                                   sym.st_size, sizeof(LaunchConfig)));
      std::string_view data = e.bytes(e.sections[sym.st_shndx]);
      LaunchConfig c{};
      if (!read_at(data, sym.st_value, &c)) return corrupt("plumb_launch's value lies outside its section");
      info->launch = c;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<CubinInfo> read_cubin(std::string_view elf) {
  auto e = open_elf(elf);
  if (!e.ok()) return e.status();
  CubinInfo info;
  const uint32_t flags = e->eh.e_flags;
  info.sm = int(e->eh.e_ident[EI_ABIVERSION] >= 8 ? (flags >> 8) & 0xffu : flags & 0xffu);
  info.arch = arch_from_notes(*e);
  Status st = read_symbols(*e, &info);
  if (!st.ok()) return st;
  return info;
}

}  // namespace plumb::kernels::cuda
