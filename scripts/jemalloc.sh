# Sourced by ocr.sh and run_tests.sh: put jemalloc under the process they start (and its children) where the
# system has it (Debian/Ubuntu: apt-get install libjemalloc2). MindSpore's runtime and graph compiler allocate
# and free many small blocks: with jemalloc a PaddleOCR-VL decode step is ~10 % shorter and the test suite ~23 %
# (docs/benchmarks.md, "jemalloc"). MS_OCR_JEMALLOC=0 keeps glibc's malloc.
if [ "${MS_OCR_JEMALLOC:-1}" != 0 ]; then
  _ms_ocr_libs=$(ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true)
  _ms_ocr_jemalloc=$(sed -n 's/^[[:space:]]*libjemalloc\.so\.2 .*=> //p' <<<"$_ms_ocr_libs" | head -n 1)
  case ":${LD_PRELOAD:-}:" in
    *":$_ms_ocr_jemalloc:"*) ;;  # already there (a nested call)
    *) [ -n "$_ms_ocr_jemalloc" ] && [ -f "$_ms_ocr_jemalloc" ] \
         && export LD_PRELOAD="$_ms_ocr_jemalloc${LD_PRELOAD:+:$LD_PRELOAD}" ;;
  esac
  unset _ms_ocr_libs _ms_ocr_jemalloc
fi
