// junkyard.cluster rocm verify: run a small kernel on every GPU HIP sees and
// check the result exactly.  Output, parsed by module_utils/rocm.py:
//   hip-check: devices <n>
//   hip-check: device <i> <gcnArchName> ok|FAIL <reason>
#include <hip/hip_runtime.h>

#include <cstdio>
#include <vector>

__global__ void scale_add(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

static bool check(hipError_t rc, int dev, const char *what) {
  if (rc == hipSuccess) return true;
  std::printf("hip-check: device %d unknown FAIL %s: %s\n", dev, what, hipGetErrorString(rc));
  return false;
}

static bool run_on(int dev) {
  const int n = 1 << 20;
  hipDeviceProp_t prop;
  if (!check(hipSetDevice(dev), dev, "hipSetDevice") ||
      !check(hipGetDeviceProperties(&prop, dev), dev, "hipGetDeviceProperties"))
    return false;
  std::vector<float> x(n), y(n, 1.0f);
  for (int i = 0; i < n; ++i) x[i] = 0.5f * static_cast<float>(i % 1024);
  float *dx = nullptr, *dy = nullptr;
  bool ok = check(hipMalloc(&dx, n * sizeof(float)), dev, "hipMalloc") &&
            check(hipMalloc(&dy, n * sizeof(float)), dev, "hipMalloc") &&
            check(hipMemcpy(dx, x.data(), n * sizeof(float), hipMemcpyHostToDevice), dev, "copy in") &&
            check(hipMemcpy(dy, y.data(), n * sizeof(float), hipMemcpyHostToDevice), dev, "copy in");
  if (ok) {
    hipLaunchKernelGGL(scale_add, dim3((n + 255) / 256), dim3(256), 0, 0, n, 2.0f, dx, dy);
    ok = check(hipGetLastError(), dev, "launch") && check(hipDeviceSynchronize(), dev, "sync") &&
         check(hipMemcpy(y.data(), dy, n * sizeof(float), hipMemcpyDeviceToHost), dev, "copy out");
  }
  hipFree(dx);
  hipFree(dy);
  if (!ok) return false;
  for (int i = 0; i < n; ++i) {
    if (y[i] != 2.0f * x[i] + 1.0f) {
      std::printf("hip-check: device %d %s FAIL wrong result at %d: %g\n", dev, prop.gcnArchName, i,
                  static_cast<double>(y[i]));
      return false;
    }
  }
  std::printf("hip-check: device %d %s ok\n", dev, prop.gcnArchName);
  return true;
}

int main() {
  int count = 0;
  hipError_t rc = hipGetDeviceCount(&count);
  if (rc != hipSuccess) count = 0;
  std::printf("hip-check: devices %d\n", count);
  int failed = 0;
  for (int dev = 0; dev < count; ++dev) failed += run_on(dev) ? 0 : 1;
  return (count == 0 || failed) ? 1 : 0;
}
