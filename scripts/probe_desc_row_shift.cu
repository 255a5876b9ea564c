// Hardware probe (sm_90a): can a wgmma shared-memory descriptor start at any 128-byte row
// of a tile stored with the 128-byte swizzle, and if so, does the descriptor's matrix
// base-offset field have to name the row within the 8-row swizzle atom?
//
// The forward kernel reads the A operand (x transposed, one time step per 128-byte row)
// at a different row for every tap, so it depends on the answer.  For each row shift
// 0..7, each k-step inside the row and base offset 0 or (address >> 7) & 7, one
// m64n64k8 TF32 wgmma is compared against the same product on the CPU (small integers,
// exact in TF32).  Build and run:
//   nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels scripts/probe_desc_row_shift.cu -o /tmp/probe && /tmp/probe
#include <cstdio>
#include <cstdint>

#include "ptx.cuh"

using namespace causalconv;

constexpr int kRowsA = 80, kRowsB = 64, kCols = 32;  // fp32: 32 per 128-byte row

__host__ __device__ inline float a_val(int r, int c) { return static_cast<float>((r * 7 + c * 3) % 9 - 4); }
__host__ __device__ inline float b_val(int n, int c) { return static_cast<float>((n * 5 + c) % 7 - 3); }
__device__ inline uint32_t swz(int r, int c) { return r * 128 + (((c / 4) ^ (r & 7)) * 16) + (c % 4) * 4; }

__global__ void probe(float* out, int shift, int kk, int use_base_offset) {
#if CAUSALCONV_HAS_WGMMA
  extern __shared__ __align__(16) uint8_t raw[];
  const uint32_t base = (ptx::smem_addr(raw) + 1023u) & ~1023u;
  uint8_t* p = raw + (base - ptx::smem_addr(raw));
  for (int e = threadIdx.x; e < kRowsA * kCols; e += blockDim.x)
    *reinterpret_cast<float*>(p + swz(e / kCols, e % kCols)) = a_val(e / kCols, e % kCols);
  uint8_t* pb = p + kRowsA * 128 + 1024 - (kRowsA * 128) % 1024;
  const uint32_t bbase = base + static_cast<uint32_t>(pb - p);
  for (int e = threadIdx.x; e < kRowsB * kCols; e += blockDim.x)
    *reinterpret_cast<float*>(pb + swz(e / kCols, e % kCols)) = b_val(e / kCols, e % kCols);
  ptx::fence_proxy_async();
  __syncthreads();

  const uint32_t a_addr = base + shift * 128 + kk * 32;
  uint64_t da = ptx::desc_kmajor_sw128(a_addr);
  if (use_base_offset) da |= static_cast<uint64_t>((a_addr >> 7) & 7) << 49;
  const uint64_t db = ptx::desc_kmajor_sw128(bbase + kk * 32);
  float d[32];
  for (int j = 0; j < 32; ++j) d[j] = 0.f;
  ptx::wgmma_fence();
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db));
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  const int lane = threadIdx.x & 31, q = threadIdx.x >> 5;
  for (int j = 0; j < 32; ++j) {
    const int m = q * 16 + (lane >> 2) + ((j & 2) ? 8 : 0);
    const int n = (j >> 2) * 8 + 2 * (lane & 3) + (j & 1);
    out[m * 64 + n] = d[j];
  }
#endif
}

int main() {
  float* out;
  cudaMalloc(&out, 64 * 64 * sizeof(float));
  const int smem = 1024 + kRowsA * 128 + 1024 + kRowsB * 128;
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  static float host[64 * 64];
  int failures[2] = {0, 0};
  for (int v = 0; v < 2; ++v)
    for (int shift = 0; shift < 8; ++shift)
      for (int kk = 0; kk < 4; ++kk) {
        cudaMemset(out, 0xff, 64 * 64 * sizeof(float));
        probe<<<1, 128, smem>>>(out, shift, kk, v);
        cudaError_t err = cudaDeviceSynchronize();
        if (err != cudaSuccess) {
          printf("CUDA error: %s\n", cudaGetErrorString(err));
          return 2;
        }
        cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
        int bad = 0;
        for (int m = 0; m < 64; ++m)
          for (int n = 0; n < 64; ++n) {
            float ref = 0.f;
            for (int c = kk * 8; c < kk * 8 + 8; ++c) ref += a_val(shift + m, c) * b_val(n, c);
            bad += host[m * 64 + n] != ref;
          }
        failures[v] += bad != 0;
        printf("base_offset=%s shift=%d kk=%d: %s (%d wrong)\n", v ? "row" : "0", shift, kk, bad ? "WRONG" : "ok",
               bad);
      }
  printf("summary: base offset 0 -> %d/32 cases wrong; base offset = row in atom -> %d/32 wrong\n", failures[0],
         failures[1]);
  return 0;
}
