#!/usr/bin/env bash
# Which tile the tensor-core weight gradient picks, without a GPU (scripts/wgrad_tile_choice.cu).
#   CAUSALCONV_WGRAD_TILE=3,1 scripts/wgrad_tile_choice.sh 2 4,512,512,3,1,2048 32,256,256,4,1,8192
# The first argument is the operand size in bytes (4: fp32, 2: bf16/fp16), then shapes
# B,Cin,Cout,K,dilation,L.  Needs nvcc and a torch with its C++ libraries.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
elem=$1; shift
inc=$($PY -c "from torch.utils.cpp_extension import include_paths; print(' '.join('-I'+p for p in include_paths('cuda')))" 2>/dev/null)
lib=$($PY -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))" 2>/dev/null)
bin=build/check/wgrad_tile_choice
mkdir -p build/check
if [ ! -x "$bin" ] || [ -n "$(find kernels scripts/wgrad_tile_choice.cu -newer "$bin" -print -quit)" ]; then
  "$CUDA_HOME/bin/nvcc" -std=c++20 -O1 -gencode=arch=compute_90a,code=sm_90a $inc -Ikernels -D_GLIBCXX_USE_CXX11_ABI=1 \
    -DCAUSALCONV_SM90A_BUILT=1 --expt-relaxed-constexpr scripts/wgrad_tile_choice.cu -o "$bin" \
    -L"$lib" -lc10 -Xlinker -rpath="$lib"
fi
for shape in "$@"; do "$bin" "$shape" "$elem"; done
