#!/usr/bin/env bash
# Here, around the set-up's chunk calls: a device call carries the whole working tree (~41 MB since session 45)
# beside its chunk, 64 MiB in all, so the chunks were 22 MB and the set-up 83 calls of ~3.5 s. The calls that only
# keep a chunk (`setup.sh keep`) read nothing of the tree but experiments/device/, so while they are sent the tree
# can be just that folder, and a chunk ~60 MB (pack.sh with SLIM=1): ~33 calls. The calls after them
# (`setup.sh ours`, which copies src/; the server; the jobs) need the whole tree back.
#     experiments/device/slim.sh off   # take every tracked file outside experiments/device/ (but .gitignore) out of the tree
#                                      # (refused unless the tree is clean: nothing uncommitted can be lost)
#     experiments/device/slim.sh on    # put them back (git checkout of the files deleted; nothing else is touched)
#     experiments/device/slim.sh size  # bytes of the tracked files present now (what a call carries, less chunks)
# Never commit while slim: `slim.sh on` first (git status lists every file taken out as deleted).
set -euo pipefail
cd "$(dirname "$0")/../.."
KEEP=experiments/device/
size() { git ls-files -z | while IFS= read -r -d '' f; do [ -f "$f" ] && stat -c %s "$f"; done | awk '{s += $1} END {print s + 0}'; }
case "${1:-}" in
  off)
    if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
      echo "slim.sh: the working tree has uncommitted changes; commit or stash them first (nothing was removed)" >&2
      exit 1
    fi
    # The .gitignore files stay: without them .venv/, .dev/ and .keep/ would count as untracked files, and the
    # device tool sends those (session 48's first call was refused as a tree over 64 MiB).
    git ls-files -z | grep -zvE "^$KEEP|(^|/)\.git(ignore|attributes)\$" | xargs -0 rm -f
    echo "slim: $(git ls-files --deleted | wc -l) tracked files out of the tree, $(size) bytes left" ;;
  on)
    git ls-files --deleted -z | xargs -0 -r git checkout --
    echo "whole: $(git ls-files --deleted | wc -l) tracked files missing, $(size) bytes" ;;
  size)
    size ;;
  *)
    echo "usage: experiments/device/slim.sh off | on | size" >&2
    exit 2 ;;
esac
