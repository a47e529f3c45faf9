# Sourced by ocr.sh, run_tests.sh and scripts/ensure_env.sh. MindSpore's runtime and graph compiler allocate and
# free many small blocks: with jemalloc a PaddleOCR-VL decode step is ~10 % shorter and the test suite ~23 %
# (docs/journal/benchmarks.md, "jemalloc under ocr.sh" and "Test suite").

# Prints the system's jemalloc (Debian/Ubuntu: apt-get install libjemalloc2), nothing where it has none: of the
# copies ldconfig lists (a multiarch system may list another architecture's too), the first that preloads into
# /bin/true without a word from the loader.
ms_ocr_jemalloc() {
  local libs lib
  libs=$(ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true)
  for lib in $(sed -n 's/^[[:space:]]*libjemalloc\.so\.2 .*=> //p' <<<"$libs"); do
    if [ -f "$lib" ] && [ -z "$(LD_PRELOAD="$lib" /bin/true 2>&1)" ]; then
      printf '%s\n' "$lib"
      return 0
    fi
  done
}

# Puts it under the process the launcher starts (and its children), once, ahead of what LD_PRELOAD holds;
# MS_OCR_JEMALLOC=0 keeps glibc's malloc.
ms_ocr_preload_jemalloc() {
  [ "${MS_OCR_JEMALLOC:-1}" != 0 ] || return 0
  local lib
  lib=$(ms_ocr_jemalloc)
  [ -n "$lib" ] || return 0
  case ":${LD_PRELOAD:-}:" in *":$lib:"*) return 0 ;; esac  # already there (a nested call)
  export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
}
