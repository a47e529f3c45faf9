// A standalone driver of the native kernels (ms_ocr/ops/native, no MindSpore): runs one kernel entry point on
// operands read from files and writes its outputs, so the kernels can be checked where MindSpore does not run (an
// aarch64 build under qemu-user, tests/ops/test_native_isa.py). Built with the kernels' sources, or linked against a
// built library; the entry points are kernels.h's (compiled with -I ms_ocr/ops/native).
//
//   kernel_harness <kernel> <dir> <threads>
// <dir>/spec.txt: "<nparam> <ninputs>", then one line per operand (inputs, then outputs):
// "<dtype> <ndims> <dim>..." with dtype float32, bfloat16, int32 or int8 (as MindSpore names them); inputs are
// read from <dir>/in<i>.bin and outputs written to <dir>/out<j>.bin (raw, row-major; bfloat16 as 16-bit words).
// Prints the library's ISA level on stdout.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels.h"

using Kernel = int (*)(int, void**, int*, int64_t**, const char**, void*, void*);

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: kernel_harness <kernel> <dir> <threads>\n");
    return 2;
  }
  const std::string name = argv[1], dir = argv[2];
  Kernel kernel = name == "MatMulT" ? MatMulT : name == "DecodeLayer" ? DecodeLayer
                : name == "VisionAttention" ? VisionAttention : name == "CausalAttention" ? CausalAttention
                : name == "GeluTanh" ? GeluTanh
                : name == "GeluErf" ? GeluErf : name == "GatherRows" ? GatherRows
                : name == "WidenBf16" ? WidenBf16 : name == "InterpRows" ? InterpRows
                : name == "MatMulTQ8" ? MatMulTQ8 : name == "DequantQ8" ? DequantQ8 : nullptr;
  if (!kernel) {
    std::fprintf(stderr, "unknown kernel %s\n", argv[1]);
    return 2;
  }
  FILE* spec = std::fopen((dir + "/spec.txt").c_str(), "r");
  int nparam = 0, ninputs = 0;
  if (!spec || std::fscanf(spec, "%d %d", &nparam, &ninputs) != 2) return 3;
  std::vector<int> ndims(nparam);
  std::vector<std::vector<int64_t>> shapes(nparam);
  std::vector<std::vector<float>> data(nparam);
  std::vector<int64_t*> shape_ptrs(nparam);
  std::vector<void*> params(nparam);
  std::vector<std::string> dtype_names(nparam);
  std::vector<const char*> dtypes(nparam);
  for (int i = 0; i < nparam; ++i) {
    char dtype[16] = {};
    if (std::fscanf(spec, "%15s %d", dtype, &ndims[i]) != 2) return 3;
    dtype_names[i] = dtype;
    if (dtype_names[i] != "float32" && dtype_names[i] != "bfloat16" && dtype_names[i] != "int32" &&
        dtype_names[i] != "int8")
      return 3;
    dtypes[i] = dtype_names[i].c_str();
    const size_t elem = dtype_names[i] == "bfloat16" ? 2 : dtype_names[i] == "int8" ? 1 : 4;
    shapes[i].resize(ndims[i]);
    int64_t n = 1;
    for (int j = 0; j < ndims[i]; ++j) {
      long long dim = 0;
      if (std::fscanf(spec, "%lld", &dim) != 1) return 3;
      shapes[i][j] = dim;
      n *= dim;
    }
    data[i].assign(n, 0.f);  // large enough for either dtype
    shape_ptrs[i] = shapes[i].data();
    params[i] = data[i].data();
    if (i < ninputs) {
      FILE* f = std::fopen((dir + "/in" + std::to_string(i) + ".bin").c_str(), "rb");
      if (!f || std::fread(data[i].data(), elem, n, f) != static_cast<size_t>(n)) return 4;
      std::fclose(f);
    }
  }
  std::fclose(spec);
  ms_ocr_set_threads(std::atoi(argv[3]));
  const int rc = kernel(nparam, params.data(), ndims.data(), shape_ptrs.data(), dtypes.data(), nullptr, nullptr);
  if (rc != 0) {
    std::fprintf(stderr, "%s returned %d\n", argv[1], rc);
    return 5;
  }
  for (int i = ninputs; i < nparam; ++i) {
    FILE* f = std::fopen((dir + "/out" + std::to_string(i - ninputs) + ".bin").c_str(), "wb");
    if (!f || std::fwrite(data[i].data(), sizeof(float), data[i].size(), f) != data[i].size()) return 6;
    std::fclose(f);
  }
  std::printf("%s\n", ms_ocr_isa_level());
  return 0;
}
