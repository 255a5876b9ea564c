#!/usr/bin/env bash
# Compile kernel sources one by one the way the extension build does, printing ptxas
# resource usage: a fast local check that needs no GPU.  Usage: scripts/nvcc_check.sh [files...]
# .cpp files are compiled with g++ -std=c++17, as torch 2.11's extension build does;
# TORCH_INCLUDE=<dir> checks them against another torch's headers (e.g. 2.11's, unzipped
# from its wheel: the header checks differ between versions).
set -euo pipefail
PY=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
inc=$($PY -c "from torch.utils.cpp_extension import include_paths; print(' '.join('-I'+p for p in include_paths('cuda')))")
arch=${ARCH:--gencode=arch=compute_90a,code=sm_90a}
files=("$@"); [ ${#files[@]} -gt 0 ] || files=(kernels/*.cu kernels/*.cpp)
mkdir -p build/check
for f in "${files[@]}"; do
  echo "== $f"
  if [[ $f == *.cpp ]]; then
    tinc=$inc
    [ -n "${TORCH_INCLUDE:-}" ] && tinc="-I$TORCH_INCLUDE -I$TORCH_INCLUDE/torch/csrc/api/include -I$CUDA_HOME/include"
    pyinc=$($PY -c "import sysconfig; print(sysconfig.get_paths()['include'])")
    g++ -std=${CXX_STD:-c++17} -O3 -fPIC $tinc -I"$pyinc" -Ikernels -DTORCH_EXTENSION_NAME=check \
      -DTORCH_API_INCLUDE_EXTENSION_H -D_GLIBCXX_USE_CXX11_ABI=1 -c "$f" -o "build/check/$(basename "$f").o" 2>&1 \
      | grep -E "error|warning" || true
    continue
  fi
  "$CUDA_HOME/bin/nvcc" -std=c++20 -O3 $arch -Xptxas -v $inc -D_GLIBCXX_USE_CXX11_ABI=1 \
    -DCAUSALCONV_SM90A_BUILT=1 --expt-relaxed-constexpr -c "$f" -o "build/check/$(basename "$f").o" 2>&1 \
    | grep -v "^ptxas info    : Function properties" | grep -E "error|warning|registers|spill|stack|Compiling entry|Performance Loss" | sed 's/ptxas info    : //' || true
done
