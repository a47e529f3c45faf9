# Sourced by ocr.sh and run_tests.sh: put jemalloc under the process they start (and its children) where the
# system has it (Debian/Ubuntu: apt-get install libjemalloc2). MindSpore's runtime and graph compiler allocate
# and free many small blocks: with jemalloc a PaddleOCR-VL decode step is ~10 % shorter and the test suite ~23 %
# (docs/benchmarks.md, "jemalloc under ocr.sh" and "Test suite"). MS_OCR_JEMALLOC=0 keeps glibc's malloc.
# Of the copies ldconfig lists (a multiarch system may list another architecture's too), the first that preloads
# into /bin/true without a word from the loader.
if [ "${MS_OCR_JEMALLOC:-1}" != 0 ]; then
  _ms_ocr_libs=$(ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true)
  for _ms_ocr_lib in $(sed -n 's/^[[:space:]]*libjemalloc\.so\.2 .*=> //p' <<<"$_ms_ocr_libs"); do
    case ":${LD_PRELOAD:-}:" in *":$_ms_ocr_lib:"*) break ;; esac  # already there (a nested call)
    if [ -f "$_ms_ocr_lib" ] && [ -z "$(LD_PRELOAD="$_ms_ocr_lib" /bin/true 2>&1)" ]; then
      export LD_PRELOAD="$_ms_ocr_lib${LD_PRELOAD:+:$LD_PRELOAD}"
      break
    fi
  done
  unset _ms_ocr_libs _ms_ocr_lib
fi
