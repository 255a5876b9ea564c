#!/usr/bin/env bash
# Compile kernel sources one by one the way the extension build does, printing ptxas
# resource usage: a fast local check that needs no GPU.  Usage: scripts/nvcc_check.sh [files...]
set -euo pipefail
PY=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
inc=$($PY -c "from torch.utils.cpp_extension import include_paths; print(' '.join('-I'+p for p in include_paths('cuda')))")
arch=${ARCH:--gencode=arch=compute_90a,code=sm_90a}
files=("$@"); [ ${#files[@]} -gt 0 ] || files=(kernels/*.cu)
mkdir -p build/check
for f in "${files[@]}"; do
  echo "== $f"
  "$CUDA_HOME/bin/nvcc" -std=c++20 -O3 $arch -Xptxas -v $inc -D_GLIBCXX_USE_CXX11_ABI=1 \
    -DCAUSALCONV_SM90A_BUILT=1 --expt-relaxed-constexpr -c "$f" -o "build/check/$(basename "$f").o" 2>&1 \
    | grep -v "^ptxas info    : Function properties" | grep -E "error|warning|registers|spill|stack|Compiling entry|Performance Loss" | sed 's/ptxas info    : //' || true
done
