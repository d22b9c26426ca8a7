// PL_HD marks functions compiled for both host and device (CUDA, HIP, or plain C++).
#pragma once

#ifndef PL_HD
#if defined(__CUDACC__)
#define PL_HD __host__ __device__ __forceinline__
#elif defined(__HIP__)  // hipcc (clang) also compiles plain .cpp files as HIP, without hip_runtime.h
#define PL_HD __attribute__((host, device)) inline __attribute__((always_inline))
#else
#define PL_HD inline
#endif
#endif
