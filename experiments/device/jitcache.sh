#!/usr/bin/env bash
# On the device: the compiled-kernel caches of one stretch, brought back and carried to the next, so that a fresh
# machine does not compile them again. Stretch 6's solver server spent ~2 of its ~3.4 minutes' start after its CUDA
# graphs were captured, in vLLM's sampler warm-up (`warmup_kernels`: Triton kernels and FlashInfer's top-k/top-p
# sampler, JIT-compiled with nvcc: the bundle has flashinfer-python without prebuilt kernels); TRL's colocated
# engine compiles its own graphs at every GRPO start. The caches are keyed by source, version and GPU architecture,
# so a stale entry is a miss, never a wrong kernel.
#     experiments/device/jitcache.sh out FILE    # pack what fits in 15 MiB (smallest cache first) into FILE
#     experiments/device/jitcache.sh in FILE     # unpack FILE into $HOME, after setup.sh vllm (see below)
# Here the file is kept outside git as .keep/jitcache.tgz and carried in a call of its own (the set-up's chunks leave
# no room beside it): carry [".keep/jitcache.tgz"], `mkdir -p /tmp/dev && cp .keep/jitcache.tgz /tmp/dev/`; then
# the last bundle-B call runs `jitcache.sh in /tmp/dev/jitcache.tgz` between `setup.sh vllm` and the solver's start.
# watch.sh packs it into $OUT once the jobs have ended.
set -uo pipefail
LIMIT=$((15 * 1024 * 1024))
case "${1:-}" in
  out)
    f="$2"; rm -f "$f"
    cd "$HOME" 2>/dev/null || { echo "jitcache: no cache on this machine"; exit 0; }
    # the three caches, relative to $HOME: Triton's, FlashInfer's JIT ops, vLLM's (torch.compile, autotune)
    parts=()
    for d in .triton/cache .cache/flashinfer .cache/vllm; do [ -d "$d" ] && parts+=("$d"); done
    [ ${#parts[@]} -gt 0 ] || { echo "jitcache: no cache on this machine"; exit 0; }
    keep=(); total=0
    while read -r size d; do
      t=$(tar czf - "$d" 2>/dev/null | wc -c)
      if [ $((total + t)) -le $LIMIT ]; then keep+=("$d"); total=$((total + t)); what=kept; else what="left out (over 15 MiB)"; fi
      echo "jitcache: $d ${size} KiB on disk, $t bytes packed, $what"
    done < <(du -sk "${parts[@]}" | sort -n)
    [ ${#keep[@]} -gt 0 ] && tar czf "$f.part" "${keep[@]}" && mv "$f.part" "$f" && echo "jitcache: $f $(wc -c < "$f") bytes" ;;
  in)
    f="$2"
    [ -f "$f" ] || { echo "jitcache: $f not carried; kernels compile as on a fresh machine"; exit 0; }
    mkdir -p "$HOME" && tar xzf "$f" -C "$HOME" || exit 1
    # FlashInfer rebuilds through ninja, which compares times: the headers and sources this machine's wheels just
    # installed are newer than the objects built on the last machine, so the unpacked files are made newer still
    # (run this after setup.sh vllm, which installs FlashInfer)
    [ -d "$HOME/.cache/flashinfer" ] && find "$HOME/.cache/flashinfer" -exec touch -h {} +
    echo "jitcache: unpacked $(tar tzf "$f" | wc -l) entries into $HOME" ;;
  *) echo "usage: jitcache.sh out FILE | in FILE" >&2; exit 2 ;;
esac
