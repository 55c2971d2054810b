#!/usr/bin/env bash
# Rebuilds the real telemetry corpus (crates/gpufeed/tests/data/real/SOURCES.md) from the
# repositories' own history: for each row, `git show COMMIT:PATH` from a mirror of REPOSITORY,
# cut to the row's excerpt (`lines 1-N of M`), written to OUT/FILE. The files are data from
# other public repositories: they are kept out of this repository (OUT defaults to the ignored
# crates/gpufeed/tests/data/real/files; the steering repository's shared/telemetry is the other
# place the corpus test reads).
#
#   scripts/corpus-extract.sh MIRRORS [OUT]
#
# MIRRORS holds one git directory per repository, as `owner+name/repo` (or `owner+name.git`,
# or `owner+name` itself being a git directory). A row whose repository is missing is listed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mirrors=${1:?usage: scripts/corpus-extract.sh MIRRORS [OUT]}
out=${2:-$root/crates/gpufeed/tests/data/real/files}
sources=$root/crates/gpufeed/tests/data/real/SOURCES.md
mkdir -p "$out"
missing=0
made=0
while IFS='|' read -r _ file _shape repo path commit _bytes excerpt _rest; do
  file=$(echo "$file" | xargs); repo=$(echo "$repo" | xargs); path=$(echo "$path" | xargs)
  commit=$(echo "$commit" | xargs); excerpt=$(echo "$excerpt" | xargs)
  case "$file" in ""|file|---*) continue ;; esac
  gd=""
  for c in "$mirrors/${repo/\//+}/repo" "$mirrors/${repo/\//+}.git" "$mirrors/${repo/\//+}"; do
    if git --git-dir="$c" rev-parse --git-dir >/dev/null 2>&1; then gd=$c; break; fi
  done
  if [ -z "$gd" ]; then echo "missing mirror: $repo (for $file)" >&2; missing=$((missing + 1)); continue; fi
  case "$file" in
    mlflow-run__*) echo "skipped: $file is a run folder (extract its metrics/ by hand)" >&2; continue ;;
  esac
  if [[ "$excerpt" =~ ^lines\ 1-([0-9]+) ]]; then
    # head closes the pipe early: git's SIGPIPE is no failure.
    git --git-dir="$gd" show "$commit:$path" | head -n "${BASH_REMATCH[1]}" > "$out/$file" || true
  else
    git --git-dir="$gd" show "$commit:$path" > "$out/$file"
  fi
  made=$((made + 1))
done < <(grep '^| ' "$sources")
echo "$made files written to $out; $missing repositories missing"
