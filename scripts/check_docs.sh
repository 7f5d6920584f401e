#!/usr/bin/env bash
# The repository stands alone: fails when a tracked file cites a Markdown document that the
# repository does not contain, or cites the ../shared folder outside it.
#
# Scanned: every tracked text file under src/, tests/, bench/, scripts/, tools/, cmake/ and data/,
# the top-level CMakeLists.txt, and every tracked *.md. A citation is any path ending in ".md"
# (`docs/protocol.md`, `[kernels](kernels.md#limits)`, `../README.md`); URLs (scheme://...) are
# not citations. A citation resolves when the file exists relative to the citing file's folder or
# to the repository root, among files git tracks or would track (not ignored).
# Prints each bad citation as file:line: target, and exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/.."

self=scripts/check_docs.sh
mapfile -t files < <(git ls-files -- src tests bench scripts tools cmake data CMakeLists.txt '*.md' |
  grep -vxF "$self" | sort -u)
declare -A known=()
while IFS= read -r f; do known["$f"]=1; done < <(git ls-files --cached --others --exclude-standard)

# normalize PATH: resolves "." and ".." segments; prints nothing when it climbs above the root.
normalize() {
  local -a parts=() out=()
  local p
  IFS=/ read -ra parts <<<"$1"
  for p in "${parts[@]}"; do
    case "$p" in
    "" | .) ;;
    ..)
      [ ${#out[@]} -eq 0 ] && return 0
      unset 'out[${#out[@]}-1]'
      ;;
    *) out+=("$p") ;;
    esac
  done
  local IFS=/
  echo "${out[*]}"
}

bad=0
# A match that starts with a URL scheme is a link, not a citation; grep takes the longest match,
# so a URL's path is never seen on its own.
# The character after ".md" comes along so that code can be told from a citation: in a source file,
# a bare lower-case name followed by ; , ) [ = . or - is a member access (`data.md;`), not a
# document.
pattern='([a-z][a-z0-9+.-]*://[^[:space:])"'"'"'<>`]*)?[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md([^A-Za-z0-9_]|$)'
bare_name='^[a-z0-9_]+\.md$'
code_after='^[];,)=.[-]$'
while IFS= read -r hit; do
  file=${hit%%:*}
  rest=${hit#*:}
  line=${rest%%:*}
  match=${rest#*:}
  case "$match" in *://*) continue ;; esac
  target=${match%.md*}.md
  after=${match##*.md}
  if [[ "$file" != *.md && "$target" =~ $bare_name && "$after" =~ $code_after ]]; then
    continue
  fi
  dir=$(dirname "$file")
  from_file=$(normalize "$dir/$target")
  from_root=$(normalize "$target")
  if [ -n "$from_file" ] && [ -n "${known[$from_file]:-}" ]; then continue; fi
  if [ -n "$from_root" ] && [ -n "${known[$from_root]:-}" ]; then continue; fi
  echo "$file:$line: cites $target, which the repository does not contain" >&2
  bad=1
done < <(grep -I -n -o -E "$pattern" -- "${files[@]}" /dev/null || true)

# Nothing may point outside the repository at the shared design folder.
if grep -I -n -E '(\.\./|/work/)shared\b' -- "${files[@]}" /dev/null >&2; then
  echo "the lines above cite ../shared: cite docs/protocol.md, docs/architecture.md or docs/metrics.md" >&2
  bad=1
fi

if [ "$bad" != 0 ]; then
  echo "check_docs: FAILED" >&2
  exit 1
fi
echo "check_docs: every cited document is in the repository (${#files[@]} files)"
