// A GPU load for playbooks/burn_in.yml: multiplies two n x n matrices of ones
// on one GPU, again and again, for a number of seconds, then checks that
// every element of the result is n (a wrong value means the GPU or its memory
// computed wrongly under load).  Build: hipcc -O2 --offload-arch=<gfx> -o gpu-burn gpu-burn.hip
// Run: gpu-burn DEVICE SECONDS
#include <hip/hip_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                              \
  do {                                                                           \
    hipError_t err_ = (call);                                                    \
    if (err_ != hipSuccess) {                                                    \
      std::fprintf(stderr, "gpu-burn: %s failed: %s\n", #call, hipGetErrorString(err_)); \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

constexpr int TILE = 16;

__global__ void multiply(const float* a, const float* b, float* c, int n) {
  __shared__ float ta[TILE][TILE];
  __shared__ float tb[TILE][TILE];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * TILE + ty;
  const int col = blockIdx.x * TILE + tx;
  float acc = 0.0f;
  for (int t = 0; t < n; t += TILE) {
    ta[ty][tx] = (row < n && t + tx < n) ? a[row * n + t + tx] : 0.0f;
    tb[ty][tx] = (col < n && t + ty < n) ? b[(t + ty) * n + col] : 0.0f;
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += ta[ty][k] * tb[k][tx];
    __syncthreads();
  }
  if (row < n && col < n) c[row * n + col] = acc;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s DEVICE SECONDS\n", argv[0]);
    return 2;
  }
  const int device = std::atoi(argv[1]);
  const double seconds = std::atof(argv[2]);
  const int n = 4096;
  const size_t count = size_t(n) * n;
  CHECK(hipSetDevice(device));
  std::vector<float> host(count, 1.0f);
  float *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK(hipMalloc(&a, count * sizeof(float)));
  CHECK(hipMalloc(&b, count * sizeof(float)));
  CHECK(hipMalloc(&c, count * sizeof(float)));
  CHECK(hipMemcpy(a, host.data(), count * sizeof(float), hipMemcpyHostToDevice));
  CHECK(hipMemcpy(b, host.data(), count * sizeof(float), hipMemcpyHostToDevice));
  const dim3 block(TILE, TILE);
  const dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
  const auto start = std::chrono::steady_clock::now();
  long rounds = 0;
  double elapsed = 0.0;
  while (elapsed < seconds) {
    hipLaunchKernelGGL(multiply, grid, block, 0, 0, a, b, c, n);
    CHECK(hipGetLastError());
    CHECK(hipDeviceSynchronize());
    ++rounds;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  CHECK(hipMemcpy(host.data(), c, count * sizeof(float), hipMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += host[i] != float(n);
  std::printf("gpu-burn: GPU %d: %ld multiplications of %dx%d in %.0f s, %zu wrong elements\n",
              device, rounds, n, n, elapsed, wrong);
  if (wrong) {
    std::fprintf(stderr, "gpu-burn: GPU %d computed %zu wrong elements\n", device, wrong);
    return 3;
  }
  return 0;
}
