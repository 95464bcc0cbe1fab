#!/usr/bin/env bash
# On the device: the compiled-kernel caches of one stretch, brought back and carried to the next, so that a fresh
# machine does not compile them again. Stretch 6's solver server spent ~2 of its ~3.4 minutes' start after its CUDA
# graphs were captured, in vLLM's sampler warm-up (`warmup_kernels`: Triton kernels and FlashInfer's top-k/top-p
# sampler, JIT-compiled with nvcc: the bundle has flashinfer-python without prebuilt kernels); TRL's colocated
# engine compiles its own graphs at every GRPO start. Triton's and vLLM's caches are keyed by content hashes.
# FlashInfer builds through ninja (`deps = gcc`), which rebuilds an object older than any of its inputs, and also
# one whose time differs from the time it recorded: so the unpacked files keep their times, and the inputs this
# machine's wheels just installed (FlashInfer's sources and headers, CUTLASS, nvcc's headers: all under SITE) are
# made older than them instead (the .py files are left alone, their bytecode stays valid).
#     experiments/device/jitcache.sh out FILE         # pack what fits in 15 MiB (smallest cache first) into FILE
#     experiments/device/jitcache.sh in FILE [SITE]   # unpack FILE into $HOME, after setup.sh vllm (SITE /tmp/site)
# Here the file is kept outside git as .keep/jitcache.tar and carried in a call of its own (the set-up's chunks leave
# no room beside it): carry [".keep/jitcache.tar"], `mkdir -p /tmp/dev && cp .keep/jitcache.tar /tmp/dev/`; then
# the last bundle-B call runs `jitcache.sh in /tmp/dev/jitcache.tar` between `setup.sh vllm` and the solver's start.
# watch.sh packs it into $OUT at the end of a machine's first watch after the solver started.
set -uo pipefail
LIMIT=$((15 * 1024 * 1024))
OLD=946684800  # 2000-01-01: older than any build
case "${1:-}" in
  out)
    f=$(realpath -m "$2"); rm -f "$f"
    cd "$HOME" 2>/dev/null || { echo "jitcache: no cache on this machine"; exit 0; }
    # the three caches, relative to $HOME: Triton's, FlashInfer's JIT ops, vLLM's (torch.compile, autotune)
    parts=()
    for d in .triton/cache .cache/flashinfer .cache/vllm; do [ -d "$d" ] && parts+=("$d"); done
    [ ${#parts[@]} -gt 0 ] || { echo "jitcache: no cache on this machine"; exit 0; }
    tmp=$(mktemp -d); keep=(); total=0; i=0
    while read -r size d; do
      # each cache compressed once; tar's exit 1 ("file changed as we read it") still leaves a usable archive
      tar czf "$tmp/$i.tgz" --warning=no-file-changed "$d"; [ $? -le 1 ] || { rm -f "$tmp/$i.tgz"; continue; }
      t=$(wc -c < "$tmp/$i.tgz")
      if [ $((total + t)) -le $LIMIT ]; then keep+=("$i.tgz"); total=$((total + t)); what=kept
      else rm -f "$tmp/$i.tgz"; what="left out (over 15 MiB)"; fi
      echo "jitcache: $d ${size} KiB on disk, $t bytes packed, $what"; i=$((i + 1))
    done < <(du -sk "${parts[@]}" | sort -n)
    [ ${#keep[@]} -gt 0 ] && tar cf "$f.part" -C "$tmp" "${keep[@]}" && mv "$f.part" "$f" \
      && echo "jitcache: $f $(wc -c < "$f") bytes"
    rm -rf "$tmp" ;;
  in)
    f="$2"; site="${3:-/tmp/site}"
    [ -f "$f" ] || { echo "jitcache: $f not carried; kernels compile as on a fresh machine"; exit 0; }
    tmp=$(mktemp -d); mkdir -p "$HOME"
    tar xf "$f" -C "$tmp" || exit 1
    n=0
    for p in "$tmp"/*.tgz; do tar xzf "$p" -C "$HOME" || exit 1; n=$((n + $(tar tzf "$p" | wc -l))); done
    rm -rf "$tmp"
    [ -d "$site" ] && find "$site" \( -type f -o -type l \) ! -name '*.py' -exec touch -h -d "@$OLD" {} +
    echo "jitcache: unpacked $n entries into $HOME; the files under $site made older than them" ;;
  *) echo "usage: jitcache.sh out FILE | in FILE [SITE]" >&2; exit 2 ;;
esac
